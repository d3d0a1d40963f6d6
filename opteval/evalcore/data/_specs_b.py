"""Sample problems 25-46: more models, including the large generated ones (see _spec.py)."""
from __future__ import annotations

import numpy as np

from opteval.evalcore.data._spec import Spec, make, table

SPECS: list[Spec] = []


def add(num: int, kind: str, library: str, n_vars: int, question: str, body: str,
        footer: str | None = None) -> None:
    SPECS.append(make(num, kind, library, n_vars, question, body, footer))


add(25, "integer", "pulp", 6, """
A coastal rescue coordination centre is staffed around the clock in six 4-hour periods starting at
00:00, 04:00, 08:00, 12:00, 16:00 and 20:00, needing at least 5, 4, 9, 12, 11 and 7 coordinators
respectively. Every coordinator works one 8-hour shift made of two consecutive periods, starting
at the beginning of any period (the 20:00 shift runs into 00:00-04:00 of the next day, and the
pattern repeats daily). Union rules allow at most 3 coordinators to start at 20:00. What is the
minimum number of coordinators needed per day?
""", """
import pulp
need = [5, 4, 9, 12, 11, 7]
prob = pulp.LpProblem("rescue", pulp.LpMinimize)
x = [pulp.LpVariable(f"start_{t}", lowBound=0, cat="Integer") for t in range(6)]
prob += pulp.lpSum(x)
for t in range(6):
    prob += x[t] + x[t - 1] >= need[t]
prob += x[5] <= 3, "night_starts"
""")

_rng = np.random.default_rng(26)
_cover = []
for _j in range(15):
    _sites = sorted({int(_rng.integers(0, 10)), int(_rng.integers(0, 10)), int(_rng.integers(0, 10))})
    _cover.append(_sites)
_scost = [int(v) for v in _rng.integers(40, 95, 10)]
add(26, "binary", "scipy", 10, """
A county chooses where to base ambulances. Ten candidate stations S1-S10 have yearly costs (in
$1000s) of """ + ", ".join(str(v) for v in _scost) + """. Fifteen neighbourhoods must each be
reachable within 8 minutes from at least one open station; the stations within 8 minutes of each
neighbourhood are:
""" + "\n".join(f"N{j+1}: " + ", ".join(f"S{s+1}" for s in c) for j, c in enumerate(_cover)) + """
N1 and N2 contain care homes and must each be reachable from at least two open stations.
Minimize the total yearly cost of the open stations and report it in $1000s.
""", f"""
import numpy as np
from scipy.optimize import milp, LinearConstraint, Bounds
SENSE = 1  # minimize
cover = {_cover!r}
cost = np.array({_scost!r}, float)
A = np.zeros((15, 10))
for j, sites in enumerate(cover):
    A[j, sites] = 1
need = np.ones(15)
need[0] = need[1] = 2
integrality = np.ones(10)
res = milp(SENSE * cost, constraints=[LinearConstraint(A, lb=need, ub=np.inf)],
           bounds=Bounds(0, 1), integrality=integrality)
""")

add(27, "lp", "pulp", 16, """
A craft brewery must brew five orders on three brewing lines. An order may be split across lines
in any proportion. Hours needed to brew a whole order on each line (rows: orders O1-O5, columns:
lines L1-L3):
""" + table(["", "L1", "L2", "L3"], [["O1", 14, 18, 11], ["O2", 9, 7, 12], ["O3", 20, 16, 22],
                                     ["O4", 6, 10, 8], ["O5", 13, 12, 9]]) + """
Line L3 is down for cleaning for 4 hours and so has that much less time, i.e. its finish time is
its brewing hours plus 4. All lines start now. Minimize the time at which the last line finishes
(the makespan) and report it in hours.
""", """
import pulp
hours = [[14, 18, 11], [9, 7, 12], [20, 16, 22], [6, 10, 8], [13, 12, 9]]
prob = pulp.LpProblem("brewery", pulp.LpMinimize)
f = {(o, l): pulp.LpVariable(f"f_{o}_{l}", lowBound=0, upBound=1) for o in range(5) for l in range(3)}
T = pulp.LpVariable("makespan", lowBound=0)
prob += T
for o in range(5):
    prob += pulp.lpSum(f[o, l] for l in range(3)) == 1
for l in range(3):
    prob += pulp.lpSum(hours[o][l] * f[o, l] for o in range(5)) + (4 if l == 2 else 0) <= T
""")

add(28, "lp", "pyscipopt", 5, """
A precast-concrete plant designs one cubic metre of mix from cement ($0.14/kg), fly ash
($0.05/kg), sand ($0.018/kg), gravel ($0.015/kg) and water ($0.002/kg). The mix must weigh
exactly 2,400 kg. Binder (cement plus fly ash) must be at least 330 kg; fly ash may be at most 30%
of the binder; water must be between 150 kg and 0.45 times the binder mass; sand must be between
35% and 45% of the combined sand-plus-gravel mass. Minimize material cost per cubic metre and
report it in dollars.
""", """
from pyscipopt import Model, SCIP_PARAMSETTING
m = Model("concrete")
cem = m.addVar("cement", lb=0)
ash = m.addVar("flyash", lb=0)
sand = m.addVar("sand", lb=0)
grav = m.addVar("gravel", lb=0)
wat = m.addVar("water", lb=0)
m.addCons(cem + ash + sand + grav + wat == 2400)
m.addCons(cem + ash >= 330)
m.addCons(ash <= 0.3 * (cem + ash))
m.addCons(wat >= 150)
m.addCons(wat <= 0.45 * (cem + ash))
m.addCons(sand >= 0.35 * (sand + grav))
m.addCons(sand <= 0.45 * (sand + grav))
m.setObjective(0.14 * cem + 0.05 * ash + 0.018 * sand + 0.015 * grav + 0.002 * wat, "minimize")
""")

add(29, "integer", "scipy", 2, """
A removal company must move 92 tonnes and 310 m^3 of furniture in one day. A large-truck trip
carries up to 18 t and 55 m^3 and costs $640; a medium-truck trip carries up to 9 t and 40 m^3 and
costs $390. Only 4 large-truck trips are possible, and the company has drivers for at most 10
trips in total. Trips are whole. Minimize the day's trip cost and report it in dollars.
""", """
import numpy as np
from scipy.optimize import milp, LinearConstraint, Bounds
SENSE = 1  # minimize
c = np.array([640, 390], float)
A = np.array([[18, 9], [55, 40], [1, 1]], float)
lb = np.array([92, 310, -np.inf])
ub = np.array([np.inf, np.inf, 10])
integrality = np.ones(2)
res = milp(SENSE * c, constraints=[LinearConstraint(A, lb=lb, ub=ub)],
           bounds=Bounds([0, 0], [4, np.inf]), integrality=integrality)
""")

_rng = np.random.default_rng(30)
_npv = [int(v) for v in _rng.integers(20, 120, 15)]
_c1 = [int(v) for v in _rng.integers(10, 60, 15)]
_c2 = [int(v) for v in _rng.integers(5, 50, 15)]
add(30, "binary", "pyscipopt", 15, """
A city utility chooses which of 15 infrastructure projects (P1-P15) to fund. Each project is funded
fully or not at all. NPV and spending in years 1 and 2 (all in $ millions):
""" + table(["", "NPV", "year1", "year2"],
            [[f"P{k+1}", _npv[k], _c1[k], _c2[k]] for k in range(15)]) + """
The budget is $200M in year 1 and $160M in year 2. P4 can only be funded if P2 is funded. P9 and
P10 are alternative designs for the same site: at most one of them. The regulator requires at
least two of P11, P12 and P13. Maximize total NPV and report it in $ millions.
""", f"""
from pyscipopt import Model, quicksum, SCIP_PARAMSETTING
npv = {_npv!r}
y1 = {_c1!r}
y2 = {_c2!r}
K = range(15)
m = Model("projects")
x = [m.addVar(f"x{{k+1}}", vtype="B", lb=0, ub=1) for k in K]
m.addCons(quicksum(y1[k] * x[k] for k in K) <= 200)
m.addCons(quicksum(y2[k] * x[k] for k in K) <= 160)
m.addCons(x[3] <= x[1])
m.addCons(x[8] + x[9] <= 1)
m.addCons(x[10] + x[11] + x[12] >= 2)
m.setObjective(quicksum(npv[k] * x[k] for k in K), "maximize")
""")

add(31, "integer", "pulp", 3, """
A farm shop packs eggs for a catering order of exactly 43 eggs, using only full cartons. Cartons
hold 6 eggs ($2.10 each), 10 eggs ($3.30) or 12 eggs ($3.85). Loose eggs cannot be sent and the
order must contain exactly 43 eggs. Minimize the packaging cost in dollars, or answer
"infeasible" if the order cannot be packed.
""", """
import pulp
prob = pulp.LpProblem("eggs", pulp.LpMinimize)
a = pulp.LpVariable("six", lowBound=0, cat="Integer")
b = pulp.LpVariable("ten", lowBound=0, cat="Integer")
c = pulp.LpVariable("twelve", lowBound=0, cat="Integer")
prob += 2.10 * a + 3.30 * b + 3.85 * c
prob += 6 * a + 10 * b + 12 * c == 43
""")

_arcs = [(1, 2, 500, 2), (1, 3, 600, 3), (2, 3, 200, 1), (2, 4, 400, 2), (3, 4, 300, 1),
         (3, 6, 350, 4), (4, 5, 250, 2), (4, 7, 350, 3), (2, 5, 150, 6), (6, 7, 200, 2),
         (5, 8, 200, 3), (7, 8, 150, 1), (6, 8, 120, 5), (4, 6, 200, 2)]
add(32, "lp", "pulp", 14, """
A town's water network has a treatment plant at node 1 supplying 900 m^3/h, and demand nodes 5, 6,
7 and 8 that need exactly 180, 250, 300 and 170 m^3/h. Nodes 2, 3 and 4 are junctions. Pipes are
one-way; each is listed as (from, to, capacity m^3/h, pumping cost $ per m^3):
""" + "; ".join(f"({a}, {b}, {c}, {d})" for a, b, c, d in _arcs) + """.
Minimize the hourly pumping cost of delivering all demands and report it in dollars.
""", f"""
import pulp
arcs = {_arcs!r}
supply = {{1: 900, 2: 0, 3: 0, 4: 0, 5: -180, 6: -250, 7: -300, 8: -170}}
prob = pulp.LpProblem("water", pulp.LpMinimize)
x = {{(a, b): pulp.LpVariable(f"x_{{a}}_{{b}}", lowBound=0, upBound=cap) for a, b, cap, _ in arcs}}
prob += pulp.lpSum(cost * x[a, b] for a, b, _, cost in arcs)
for n in supply:
    out = pulp.lpSum(x[a, b] for a, b, _, _ in arcs if a == n)
    inn = pulp.lpSum(x[a, b] for a, b, _, _ in arcs if b == n)
    prob += out - inn == supply[n]
""")

_earcs = [("T", "A", 900), ("T", "B", 700), ("T", "C", 400), ("A", "B", 250), ("A", "D", 500),
          ("B", "D", 300), ("B", "E", 450), ("C", "E", 350), ("D", "S", 650), ("E", "S", 600),
          ("D", "E", 200), ("C", "S", 150)]
add(33, "lp", "scipy", 12, """
A river town plans a flood evacuation to a hill shelter S. Road links are one-way during the
evacuation and each has a capacity in vehicles per hour: """ + "; ".join(
    f"{a}->{b} {c}" for a, b, c in _earcs) + """. All vehicles start in the town T; A-E are
intersections. Find the maximum number of vehicles per hour that can reach S and report it.
""", f"""
import numpy as np
from scipy.optimize import linprog
SENSE = -1  # maximize the flow into S
arcs = {_earcs!r}
nodes = ["A", "B", "C", "D", "E"]
n = len(arcs)
c = np.array([1.0 if b == "S" else 0.0 for a, b, _ in arcs])
A_eq = np.zeros((len(nodes), n))
for k, (a, b, _) in enumerate(arcs):
    if a in nodes:
        A_eq[nodes.index(a), k] += 1
    if b in nodes:
        A_eq[nodes.index(b), k] -= 1
res = linprog(SENSE * c, A_eq=A_eq, b_eq=np.zeros(len(nodes)),
              bounds=[(0, cap) for _, _, cap in arcs], method="highs")
""")

add(34, "integer", "highspy", 2, """
A pharmacy distributor ships at least 2,600 vaccine vials to a rural clinic in insulated boxes.
A large box holds 400 vials, needs 6 kg of dry ice and costs $95 to ship; a small box holds 150
vials, needs 2.5 kg of dry ice and costs $42. Only 45 kg of dry ice are available, and the clinic
can receive at most 9 boxes. Boxes are whole. Minimize the shipping cost and report it in dollars.
""", """
import highspy
h = highspy.Highs()
h.setOptionValue("output_flag", False)
big = h.addIntegral(lb=0)
small = h.addIntegral(lb=0)
h.addConstr(400 * big + 150 * small >= 2600)
h.addConstr(6 * big + 2.5 * small <= 45)
h.addConstr(big + small <= 9)
h.minimize(95 * big + 42 * small)
""")

_dem35 = [40, 0, 65, 30, 80, 20, 55, 45]
add(35, "milp", "pyscipopt", 24, """
A pottery studio plans eight weeks of glaze production. Weekly demand in litres: """ + ", ".join(
    str(v) for v in _dem35) + """. Each week with any production costs a $300 kiln setup; each litre
costs $12 to make and at most 120 litres can be made in a week. Litres carried from one week to
the next cost $2 each per week. There is no starting stock, demand must be met on time, and no
stock is required at the end. Minimize total cost and report it in dollars.
""", f"""
from pyscipopt import Model, quicksum, SCIP_PARAMSETTING
demand = {_dem35!r}
T = range(8)
m = Model("glaze")
p = [m.addVar(f"make_{{t}}", lb=0) for t in T]
s = [m.addVar(f"stock_{{t}}", lb=0) for t in T]
y = [m.addVar(f"setup_{{t}}", vtype="B", lb=0, ub=1) for t in T]
for t in T:
    prev = s[t - 1] if t > 0 else 0
    m.addCons(prev + p[t] - demand[t] == s[t])
    m.addCons(p[t] <= 120 * y[t])
m.setObjective(quicksum(300 * y[t] + 12 * p[t] + 2 * s[t] for t in T), "minimize")
""")

add(36, "integer", "pulp", 6, """
A food truck loads trays for a festival. Menu items (tray weight kg, profit per tray $, trays
that can be sold at most, chilled?): tacos (4, 38, 12, no), burritos (5, 44, 8, no), salads
(3, 27, 10, yes), ice cream (6, 52, 5, yes), churros (2, 15, 15, no), smoothies (4, 39, 9, yes).
The truck can carry 125 kg, and its fridge holds at most 14 chilled trays. Only whole trays are
loaded. Maximize profit and report it in dollars.
""", """
import pulp
w = [4, 5, 3, 6, 2, 4]
profit = [38, 44, 27, 52, 15, 39]
most = [12, 8, 10, 5, 15, 9]
chilled = [0, 0, 1, 1, 0, 1]
prob = pulp.LpProblem("foodtruck", pulp.LpMaximize)
x = [pulp.LpVariable(f"trays_{k}", lowBound=0, upBound=most[k], cat="Integer") for k in range(6)]
prob += pulp.lpSum(profit[k] * x[k] for k in range(6))
prob += pulp.lpSum(w[k] * x[k] for k in range(6)) <= 125
prob += pulp.lpSum(chilled[k] * x[k] for k in range(6)) <= 14
""")

_rng = np.random.default_rng(37)
_hrs = [[int(v) for v in row] for row in _rng.integers(3, 15, (5, 15))]
_rate = [45, 52, 38, 60, 41]
_capt = [30, 28, 26, 34, 25]
add(37, "binary", "scipy", 75, """
A translation agency assigns 15 documents (J1-J15) to five translators (T1-T5); each document goes
to exactly one translator. Hours each translator would need for each document:
""" + table(["", *[f"J{j+1}" for j in range(15)]], [[f"T{i+1}", *_hrs[i]] for i in range(5)]) + """
Hourly rates are $""" + ", $".join(str(v) for v in _rate) + """ for T1-T5, and their available hours this
week are """ + ", ".join(str(v) for v in _capt) + """. Minimize the total cost of the translations
and report it in dollars.
""", f"""
import numpy as np
from scipy.optimize import milp, LinearConstraint, Bounds
SENSE = 1  # minimize
hours = np.array({_hrs!r}, float)
rate = np.array({_rate!r}, float)
cap = np.array({_capt!r}, float)
I, J = hours.shape
c = (rate[:, None] * hours).ravel()
A_assign = np.zeros((J, I * J))
for j in range(J):
    A_assign[j, [i * J + j for i in range(I)]] = 1
A_cap = np.zeros((I, I * J))
for i in range(I):
    A_cap[i, i * J:(i + 1) * J] = hours[i]
integrality = np.ones(I * J)
res = milp(SENSE * c, constraints=[LinearConstraint(A_assign, 1, 1), LinearConstraint(A_cap, 0, cap)],
           bounds=Bounds(0, 1), integrality=integrality)
""")

add(38, "qp", "pyscipopt", 3, """
A roastery prices two coffee blends. Weekly demand in bags depends on both prices (in $ per bag):
house blend q1 = 900 - 60 p1 + 25 p2, single-origin q2 = 700 + 20 p1 - 50 p2. Bags cost $4.00
(house) and $3.50 (single-origin) to produce, both prices must lie between $5 and $15, and the
roaster can produce at most 700 bags per week in total. Choose the prices to maximize weekly
profit (price minus cost, times demand, summed over blends) and report it in dollars.
""", """
from pyscipopt import Model, SCIP_PARAMSETTING
m = Model("pricing")
p1 = m.addVar("p1", lb=5, ub=15)
p2 = m.addVar("p2", lb=5, ub=15)
t = m.addVar("profit", lb=None)
q1 = 900 - 60 * p1 + 25 * p2
q2 = 700 + 20 * p1 - 50 * p2
m.addCons(q1 >= 0)
m.addCons(q2 >= 0)
m.addCons(q1 + q2 <= 700)
m.addCons(t <= (p1 - 4.0) * q1 + (p2 - 3.5) * q2)
m.setObjective(t, "maximize")
""")

_rng = np.random.default_rng(39)
_fx = [int(v) for v in _rng.integers(900, 2200, 6)]
_fcap = [int(v) for v in _rng.integers(180, 320, 6)]
_cd = [int(v) for v in _rng.integers(10, 45, 25)]
_pos_w = _rng.uniform(0, 100, (6, 2))
_pos_c = _rng.uniform(0, 100, (25, 2))
_uc = [[int(round(np.hypot(*(_pos_w[i] - _pos_c[j])) / 10)) + 1 for j in range(25)] for i in range(6)]
add(39, "milp", "pulp", 156, """
An online grocer decides which of six candidate micro-warehouses (W1-W6) to lease and how to
serve 25 neighbourhoods (C1-C25) from them. Each neighbourhood's daily orders may be split across
open warehouses. Leasing costs per day: """ + ", ".join(f"W{i+1} ${v}" for i, v in enumerate(_fx)) + """.
Daily capacities (orders): """ + ", ".join(f"W{i+1} {v}" for i, v in enumerate(_fcap)) + """.
Daily orders per neighbourhood: """ + " ".join(f"C{j+1}={v}" for j, v in enumerate(_cd)) + """.
Delivery cost in $ per order (row = warehouse, column = neighbourhood):
""" + table(["", *[f"C{j+1}" for j in range(25)]], [[f"W{i+1}", *_uc[i]] for i in range(6)]) + """
All orders must be delivered and a closed warehouse ships nothing. Minimize the total daily cost
(leases plus deliveries) and report it in dollars.
""", f"""
import pulp
fixed = {_fx!r}
cap = {_fcap!r}
orders = {_cd!r}
cost = {_uc!r}
I, J = range(6), range(25)
prob = pulp.LpProblem("grocer", pulp.LpMinimize)
open_ = [pulp.LpVariable(f"open_{{i}}", lowBound=0, upBound=1, cat="Binary") for i in I]
x = {{(i, j): pulp.LpVariable(f"x_{{i}}_{{j}}", lowBound=0) for i in I for j in J}}
prob += pulp.lpSum(fixed[i] * open_[i] for i in I) + pulp.lpSum(cost[i][j] * x[i, j] for i in I for j in J)
for j in J:
    prob += pulp.lpSum(x[i, j] for i in I) == orders[j]
for i in I:
    prob += pulp.lpSum(x[i, j] for j in J) <= cap[i] * open_[i]
    for j in J:
        prob += x[i, j] <= orders[j] * open_[i]
""")

add(40, "integer", "scipy", 7, """
A lake beach hires lifeguards who each work five consecutive days and then have two days off,
repeating weekly (a lifeguard starting on Saturday works Sat-Wed). Lifeguards needed Monday to
Sunday: 11, 9, 9, 10, 13, 16, 17. How many lifeguards must be hired at minimum to cover every
day?
""", """
import numpy as np
from scipy.optimize import milp, LinearConstraint, Bounds
SENSE = 1  # minimize
need = np.array([11, 9, 9, 10, 13, 16, 17])
A = np.zeros((7, 7))
for start in range(7):
    for k in range(5):
        A[(start + k) % 7, start] = 1
integrality = np.ones(7)
res = milp(SENSE * np.ones(7), constraints=[LinearConstraint(A, lb=need, ub=np.inf)],
           bounds=Bounds(0, np.inf), integrality=integrality)
""")

_rng = np.random.default_rng(41)
_vcost = [[round(float(v), 3) for v in row] for row in _rng.uniform(0.020, 0.060, (5, 6))]
_vcap = [int(v) for v in _rng.integers(3000, 7000, 5)]
_vneed = [int(v) for v in _rng.integers(1500, 4000, 6)]
_carbon = [120, 410, 260, 90, 330]
add(41, "lp", "pulp", 30, """
A research lab runs six batch workloads (W1-W6) on cloud regions R1-R5 this month and may split a
workload across regions. vCPU-hours needed: """ + ", ".join(f"W{k+1} {v}" for k, v in enumerate(_vneed)) + """.
Region capacity in vCPU-hours: """ + ", ".join(f"R{k+1} {v}" for k, v in enumerate(_vcap)) + """.
Price in $ per vCPU-hour (row = region, column = workload):
""" + table(["", *[f"W{k+1}" for k in range(6)]], [[f"R{i+1}", *_vcost[i]] for i in range(5)]) + """
Grid carbon intensity is """ + ", ".join(f"R{k+1} {v}" for k, v in enumerate(_carbon)) + """ grams CO2 per
vCPU-hour, and the lab's monthly cap is 4,000 kg CO2. W1 and W2 process patient data and may not
run in R3 or R4. Minimize the monthly compute bill and report it in dollars.
""", f"""
import pulp
price = {_vcost!r}
cap = {_vcap!r}
need = {_vneed!r}
carbon = {_carbon!r}
R, W = range(5), range(6)
prob = pulp.LpProblem("cloud", pulp.LpMinimize)
x = {{(r, w): pulp.LpVariable(f"x_{{r}}_{{w}}", lowBound=0) for r in R for w in W}}
prob += pulp.lpSum(price[r][w] * x[r, w] for r in R for w in W)
for w in W:
    prob += pulp.lpSum(x[r, w] for r in R) == need[w]
for r in R:
    prob += pulp.lpSum(x[r, w] for w in W) <= cap[r]
prob += pulp.lpSum(carbon[r] * x[r, w] for r in R for w in W) <= 4000 * 1000, "carbon_cap"
for w in (0, 1):
    for r in (2, 3):
        prob += x[r, w] == 0
""")

_rng = np.random.default_rng(42)
_seg_risk = [int(v) for v in _rng.integers(1, 10, 20)]
_site_cov = [sorted({int(v) for v in _rng.integers(0, 20, 4)}) for _ in range(12)]
add(42, "binary", "pyscipopt", 32, """
A gas utility can install leak sensors at up to 5 of 12 candidate sites (A1-A12) along a pipeline
of 20 segments (G1-G20). A segment counts as monitored if at least one installed sensor covers it.
Segment risk weights G1-G20: """ + ", ".join(str(v) for v in _seg_risk) + """.
Segments covered by each site:
""" + "\n".join(f"A{k+1}: " + ", ".join(f"G{s+1}" for s in c) for k, c in enumerate(_site_cov)) + """
Sites A3 and A7 share a mounting bracket, so installing one of them means installing both.
Maximize the total risk weight of monitored segments and report it.
""", f"""
from pyscipopt import Model, quicksum, SCIP_PARAMSETTING
risk = {_seg_risk!r}
cover = {_site_cov!r}
m = Model("sensors")
x = [m.addVar(f"site_{{k}}", vtype="B", lb=0, ub=1) for k in range(12)]
z = [m.addVar(f"seg_{{s}}", vtype="B", lb=0, ub=1) for s in range(20)]
for s in range(20):
    m.addCons(z[s] <= quicksum(x[k] for k in range(12) if s in cover[k]))
m.addCons(quicksum(x) <= 5)
m.addCons(x[2] == x[6])
m.setObjective(quicksum(risk[s] * z[s] for s in range(20)), "maximize")
""")

add(43, "lp", "scipy", 4, """
A furniture workshop makes stools, chairs, benches and tables with profits of $18, $34, $41 and
$95 per unit. Hours per unit on the saw / lathe / finishing line: stool 0.5/0.8/0.4, chair
1.0/1.2/0.9, bench 1.4/0.3/1.1, table 2.5/1.0/2.2, with 400, 320 and 380 hours available this
month. Stools may make up at most 25% of all units (display space), and at most 60 tables can be sold.
Fractional units are allowed in this plan. Maximize monthly profit and report it in dollars.
""", """
import numpy as np
from scipy.optimize import linprog
SENSE = -1  # maximize
c = np.array([18, 34, 41, 95], float)
A_ub = np.array([[0.5, 1.0, 1.4, 2.5], [0.8, 1.2, 0.3, 1.0], [0.4, 0.9, 1.1, 2.2],
                 [0.75, -0.25, -0.25, -0.25]])
b_ub = np.array([400, 320, 380, 0])
bounds = [(0, None)] * 3 + [(0, 60)]
res = linprog(SENSE * c, A_ub=A_ub, b_ub=b_ub, bounds=bounds, method="highs")
""")

add(44, "nlp", "scipy", 5, """
An orchard co-op splits 900 thousand litres of irrigation water among five fields. Field k yields
a_k * ln(1 + x_k / b_k) tonnes of fruit when given x_k thousand litres, with (a_k, b_k) =
(40, 120), (55, 200), (32, 80), (70, 300), (25, 60). Each field must receive at least 50 and at
most 300 thousand litres. Maximize the total yield and report it in tonnes.
""", """
import numpy as np
from scipy.optimize import minimize
a = np.array([40, 55, 32, 70, 25], float)
b = np.array([120, 200, 80, 300, 60], float)
f = lambda x: -np.sum(a * np.log1p(x / b))
g = lambda x: -a / (b + x)
cons = [{"type": "ineq", "fun": lambda x: 900 - x.sum(), "jac": lambda x: -np.ones(5)}]
res = minimize(f, np.full(5, 150.0), jac=g, bounds=[(50, 300)] * 5, constraints=cons,
               method="SLSQP", options={"ftol": 1e-10, "maxiter": 500})
if not res.success:
    raise RuntimeError(res.message)
submit(round(float(-res.fun), 6))
""", footer="custom")

_routes = [([1, 2, 3], 14.2), ([4, 5], 7.7), ([6, 7, 8], 15.1), ([1, 4], 8.7), ([2, 5, 6], 13.9),
           ([3, 7], 9.4), ([8], 4.3), ([1, 2], 7.9), ([3, 4, 5], 12.6), ([6, 8], 10.3),
           ([7], 3.6), ([2, 3, 6, 7], 17.5)]
add(45, "binary", "pulp", 12, """
A rural school runs minibuses from the depot to collect pupils from eight hamlets (H1-H8). The
transport office has drawn up twelve candidate round trips, each visiting some hamlets (length in
km): """ + "; ".join(f"T{k+1}: " + "+".join(f"H{s}" for s in stops) + f" ({km} km)"
                     for k, (stops, km) in enumerate(_routes)) + """.
Every hamlet must be visited by exactly one chosen trip (so no hamlet gets two buses), and only
three minibuses are available, each making one trip. Minimize the total km driven and report it.
""", f"""
import pulp
routes = {_routes!r}
prob = pulp.LpProblem("school_bus", pulp.LpMinimize)
x = [pulp.LpVariable(f"trip_{{k}}", lowBound=0, upBound=1, cat="Binary") for k in range(len(routes))]
prob += pulp.lpSum(km * x[k] for k, (_, km) in enumerate(routes))
for h in range(1, 9):
    prob += pulp.lpSum(x[k] for k, (stops, _) in enumerate(routes) if h in stops) == 1
prob += pulp.lpSum(x) <= 3, "minibuses"
""")

add(46, "milp", "pyscipopt", 18, """
A call centre plans staffing for six months. It starts with 42 trained agents. Agent-months needed
in months 1-6: 40, 48, 55, 61, 50, 44. An agent costs $3,600 per month. New hires need one month
of training: an agent hired at the start of month t costs $3,600 that month but only counts
toward capacity from month t+1 on; hiring costs an extra $1,500 per person. Laying off an agent at
the start of a month costs $2,200 per person. At most 10 people can be hired in any month. Hires
and layoffs are whole people. Minimize the total six-month cost and report it in dollars.
""", """
from pyscipopt import Model, quicksum, SCIP_PARAMSETTING
need = [40, 48, 55, 61, 50, 44]
T = range(6)
m = Model("callcentre")
hire = [m.addVar(f"hire_{t}", vtype="I", lb=0, ub=10) for t in T]
fire = [m.addVar(f"fire_{t}", vtype="I", lb=0) for t in T]
trained = [m.addVar(f"trained_{t}", vtype="I", lb=0) for t in T]
for t in T:
    prev = 42 if t == 0 else trained[t - 1] + hire[t - 1]
    m.addCons(trained[t] == prev - fire[t])
    m.addCons(trained[t] >= need[t])
m.setObjective(quicksum(3600 * (trained[t] + hire[t]) + 1500 * hire[t] + 2200 * fire[t]
                        for t in T), "minimize")
""")
