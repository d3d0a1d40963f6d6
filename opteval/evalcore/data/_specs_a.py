"""Sample problems 1-24: small hand-written models (see _spec.py for the conventions)."""
from __future__ import annotations

import numpy as np

from opteval.evalcore.data._spec import Spec, make, table

SPECS: list[Spec] = []


def add(num: int, kind: str, library: str, n_vars: int, question: str, body: str,
        footer: str | None = None) -> None:
    SPECS.append(make(num, kind, library, n_vars, question, body, footer))


add(1, "lp", "pulp", 2, """
A neighbourhood bakery bakes sourdough and rye loaves. A sourdough loaf earns $3.40 profit and uses
0.5 kg of flour and 6 minutes of oven time; a rye loaf earns $2.90 and uses 0.45 kg of flour and
4 minutes of oven time. This week 220 kg of flour and 2,400 oven-minutes are available. The cafe
next door has ordered at least 100 sourdough loaves, and at most 300 rye loaves can be sold.
Partial loaves may be planned (treat quantities as continuous). Maximize the week's total profit
and report it in dollars.
""", """
import pulp
prob = pulp.LpProblem("bakery", pulp.LpMaximize)
s = pulp.LpVariable("sourdough", lowBound=100)
r = pulp.LpVariable("rye", lowBound=0, upBound=300)
prob += 3.40 * s + 2.90 * r
prob += 0.5 * s + 0.45 * r <= 220, "flour"
prob += 6 * s + 4 * r <= 2400, "oven"
""")

add(2, "integer", "pulp", 2, """
A courier start-up is buying delivery drones. A "Hawk" drone carries 4 kg and costs $7,300; a
"Sparrow" carries 1.5 kg and costs $2,900. The fleet must be able to carry at least 37 kg in total
at the same time, and the hangar has 14 charging pads (one drone per pad). Drones are bought
whole. What is the minimum total purchase cost in dollars?
""", """
import pulp
prob = pulp.LpProblem("drones", pulp.LpMinimize)
hawk = pulp.LpVariable("hawk", lowBound=0, cat="Integer")
sparrow = pulp.LpVariable("sparrow", lowBound=0, cat="Integer")
prob += 7300 * hawk + 2900 * sparrow
prob += 4 * hawk + 1.5 * sparrow >= 37, "payload"
prob += hawk + sparrow <= 14, "pads"
""")

add(3, "binary", "pyscipopt", 8, """
A university weather-balloon flight can carry at most 15 kg of instruments and supply at most
60 W of power. Candidate instruments (mass kg, power W, science score):
I1 (3.2, 12, 41), I2 (4.5, 20, 55), I3 (2.1, 6, 24), I4 (5.6, 25, 70),
I5 (3.8, 15, 46), I6 (1.9, 5, 19), I7 (2.7, 9, 33), I8 (4.1, 18, 50).
I2 and I5 interfere with each other, so at most one of them can fly. I7 draws its reference
signal from I1, so I7 can only fly if I1 flies. Each instrument either flies or not. Choose the
payload that maximizes the total science score and report that score.
""", """
from pyscipopt import Model, quicksum, SCIP_PARAMSETTING
mass = [3.2, 4.5, 2.1, 5.6, 3.8, 1.9, 2.7, 4.1]
power = [12, 20, 6, 25, 15, 5, 9, 18]
score = [41, 55, 24, 70, 46, 19, 33, 50]
m = Model("balloon")
x = [m.addVar(f"x{i+1}", vtype="B", lb=0, ub=1) for i in range(8)]
m.addCons(quicksum(mass[i] * x[i] for i in range(8)) <= 15)
m.addCons(quicksum(power[i] * x[i] for i in range(8)) <= 60)
m.addCons(x[1] + x[4] <= 1)
m.addCons(x[6] <= x[0])
m.setObjective(quicksum(score[i] * x[i] for i in range(8)), "maximize")
""")

add(4, "lp", "scipy", 3, """
A dairy-goat farm mixes a daily ration from alfalfa hay, rolled oats and soybean meal.
Per kg: hay costs $0.32 and supplies 170 g protein, 8.9 MJ energy and 280 g fibre; oats cost
$0.41 and supply 115 g protein, 11.6 MJ energy and 110 g fibre; soybean meal costs $0.78 and
supplies 440 g protein, 13.0 MJ energy and 70 g fibre. Each goat needs at least 190 g protein,
at least 14 MJ energy and at least 250 g fibre per day, and cannot eat more than 2.2 kg of feed
per day. All 60 goats get the same ration. What is the minimum daily feed cost for the whole
herd, in dollars?
""", """
import numpy as np
from scipy.optimize import linprog
SENSE = 1  # minimize
c = np.array([0.32, 0.41, 0.78]) * 60
A_ub = -np.array([[170, 115, 440], [8.9, 11.6, 13.0], [280, 110, 70]])
b_ub = -np.array([190, 14, 250])
A_ub = np.vstack([A_ub, [1, 1, 1]])
b_ub = np.append(b_ub, 2.2)
res = linprog(SENSE * c, A_ub=A_ub, b_ub=b_ub, bounds=[(0, None)] * 3, method="highs")
""")

add(5, "lp", "pulp", 2, """
A hospital must staff its night ward with at least 420 nurse-hours next week. Staff registered
nurses cost $58 per hour and at most 300 RN hours are available; agency nurses cost $85 per hour
and the agency can supply at most 200 hours. At least 40% of the hours must be worked by staff
RNs. The ward's weekly staffing budget is $21,000. Find the cheapest staffing plan and report its
cost in dollars; if no plan satisfies every requirement, answer "infeasible".
""", """
import pulp
prob = pulp.LpProblem("night_ward", pulp.LpMinimize)
rn = pulp.LpVariable("rn_hours", lowBound=0, upBound=300)
ag = pulp.LpVariable("agency_hours", lowBound=0, upBound=200)
prob += 58 * rn + 85 * ag
prob += rn + ag >= 420, "coverage"
prob += rn >= 0.4 * (rn + ag), "rn_share"
prob += 58 * rn + 85 * ag <= 21000, "budget"
""")

add(6, "lp", "pyscipopt", 2, """
A compost co-op sells finished compost (profit $18 per tonne) and wood mulch (profit $11 per
tonne). Its curing bins mean compost output can exceed mulch output by at most 50 tonnes per
week; to keep its contracts it must produce at least 20 tonnes of mulch, and compost must be at
least 30% of the mulch tonnage for quality balance. No other limits apply. Maximize weekly
profit; answer with the profit in dollars, or "unbounded"/"infeasible" if that is the case.
""", """
from pyscipopt import Model, SCIP_PARAMSETTING
m = Model("compost")
x = m.addVar("compost", lb=0)
y = m.addVar("mulch", lb=20)
m.addCons(x - y <= 50)
m.addCons(x >= 0.3 * y)
m.setObjective(18 * x + 11 * y, "maximize")
""")

add(7, "qp", "scipy", 4, """
A credit union invests its reserve in four funds with expected annual returns (in %) of
6.2, 8.9, 4.1 and 11.5. The covariance matrix of returns, in %^2, is
[[64, 18, 6, 30], [18, 121, 9, 55], [6, 9, 16, 4], [30, 55, 4, 225]].
Weights must be non-negative, sum to 1, no single fund may exceed 40% of the reserve, and the
portfolio's expected return must be at least 7.5%. Minimize the portfolio variance w' S w and
report the minimum variance in %^2.
""", """
import numpy as np
from scipy.optimize import minimize
mu = np.array([6.2, 8.9, 4.1, 11.5])
S = np.array([[64, 18, 6, 30], [18, 121, 9, 55], [6, 9, 16, 4], [30, 55, 4, 225]], float)
cons = [{"type": "eq", "fun": lambda w: w.sum() - 1, "jac": lambda w: np.ones(4)},
        {"type": "ineq", "fun": lambda w: mu @ w - 7.5, "jac": lambda w: mu}]
res = minimize(lambda w: w @ S @ w, np.full(4, 0.25), jac=lambda w: 2 * S @ w,
               bounds=[(0, 0.4)] * 4, constraints=cons, method="SLSQP",
               options={"ftol": 1e-10, "maxiter": 500})
if not res.success:
    raise RuntimeError(res.message)
submit(round(float(res.fun), 6))
""", footer="custom")

add(8, "nlp", "pyscipopt", 3, """
A farm is ordering a closed cylindrical steel water tank (flat top and bottom) that must hold
at least 50 cubic metres. The barn ceiling limits the tank's height to 3 m. Steel plate costs
$42 per square metre of surface (top, bottom and side). Choose the radius and height that
minimize the steel cost and report the minimum cost in dollars.
""", """
import math
from pyscipopt import Model, SCIP_PARAMSETTING
m = Model("tank")
r = m.addVar("radius", lb=0.1, ub=20)
h = m.addVar("height", lb=0.1, ub=3)
area = m.addVar("area", lb=0)
m.addCons(math.pi * r * r * h >= 50)
m.addCons(area >= 2 * math.pi * r * r + 2 * math.pi * r * h)
m.setObjective(42 * area, "minimize")
""")

add(9, "milp", "pulp", 24, """
A data centre cools five server halls with loads of 310, 420, 260, 540 and 380 kW. Four chillers
can be switched on for the day; a chiller that is on costs a fixed amount and can deliver up to
its capacity, split across halls as needed:
""" + table(["chiller", "fixed $/day", "capacity kW"],
            [["A", 820, 900], ["B", 640, 650], ["C", 1100, 1400], ["D", 500, 450]]) + """
Delivering cooling from a chiller to a hall costs (in $ per kW per day):
""" + table(["", "H1", "H2", "H3", "H4", "H5"],
            [["A", 0.42, 0.55, 0.61, 0.48, 0.70], ["B", 0.58, 0.39, 0.52, 0.66, 0.45],
             ["C", 0.50, 0.47, 0.44, 0.41, 0.53], ["D", 0.71, 0.62, 0.40, 0.57, 0.38]]) + """
For redundancy at least two chillers must be on, and chillers B and C share a power feed, so at
most one of them can be on. Every hall's load must be met exactly. Minimize the total daily
cost (fixed plus delivery) and report it in dollars.
""", """
import pulp
fixed = [820, 640, 1100, 500]
cap = [900, 650, 1400, 450]
load = [310, 420, 260, 540, 380]
cost = [[0.42, 0.55, 0.61, 0.48, 0.70], [0.58, 0.39, 0.52, 0.66, 0.45],
        [0.50, 0.47, 0.44, 0.41, 0.53], [0.71, 0.62, 0.40, 0.57, 0.38]]
I, J = range(4), range(5)
prob = pulp.LpProblem("chillers", pulp.LpMinimize)
on = [pulp.LpVariable(f"on_{i}", lowBound=0, upBound=1, cat="Binary") for i in I]
q = [[pulp.LpVariable(f"q_{i}_{j}", lowBound=0) for j in J] for i in I]
prob += pulp.lpSum(fixed[i] * on[i] for i in I) + pulp.lpSum(cost[i][j] * q[i][j] for i in I for j in J)
for j in J:
    prob += pulp.lpSum(q[i][j] for i in I) == load[j]
for i in I:
    prob += pulp.lpSum(q[i][j] for j in J) <= cap[i] * on[i]
prob += pulp.lpSum(on) >= 2
prob += on[1] + on[2] <= 1
""")

# 10: 10 x 20 transportation, data drawn deterministically
_rng = np.random.default_rng(10)
_sup = [int(v) for v in _rng.integers(60, 140, 10)]
_dem = [int(v) for v in _rng.integers(25, 60, 20)]
_cost = [[int(v) for v in row] for row in _rng.integers(4, 41, (10, 20))]
_cost[2][6] = 1  # the closed route would be the cheapest one
add(10, "lp", "pulp", 200, """
Ten grain depots (D1-D10) supply twenty feed mills (M1-M20). Depot supplies in tonnes:
""" + " ".join(f"D{i+1}={v}" for i, v in enumerate(_sup)) + """.
Mill requirements in tonnes (each must be met exactly):
""" + " ".join(f"M{j+1}={v}" for j, v in enumerate(_dem)) + """.
Shipping cost in $ per tonne (row = depot, column = mill):
""" + table(["", *[f"M{j+1}" for j in range(20)]],
            [[f"D{i+1}", *_cost[i]] for i in range(10)]) + """
A depot need not ship all its grain. The road from D3 to M7 is closed for repairs, so nothing can
be shipped on that route. Minimize the total shipping cost and report it in dollars.
""", f"""
import pulp
supply = {_sup!r}
demand = {_dem!r}
cost = {_cost!r}
I, J = range(10), range(20)
prob = pulp.LpProblem("grain", pulp.LpMinimize)
x = {{(i, j): pulp.LpVariable(f"x_{{i}}_{{j}}", lowBound=0) for i in I for j in J}}
prob += pulp.lpSum(cost[i][j] * x[i, j] for i in I for j in J)
for i in I:
    prob += pulp.lpSum(x[i, j] for j in J) <= supply[i]
for j in J:
    prob += pulp.lpSum(x[i, j] for i in I) == demand[j]
prob += x[2, 6] == 0, "closed_road"
""")

# 11: 12 x 12 assignment with licence restrictions
_rng = np.random.default_rng(11)
_mins = [[int(v) for v in row] for row in _rng.integers(20, 71, (12, 12))]
for _d in (1, 4):
    for _r in (2, 7, 10):
        _mins[_d][_r] = 15  # tempting but forbidden
add(11, "binary", "pyscipopt", 144, """
A school district assigns twelve bus drivers (D1-D12) to twelve morning routes (R1-R12), one
route per driver and one driver per route. The estimated minutes each driver needs for each route
(including the drive from home to the depot) are:
""" + table(["", *[f"R{j+1}" for j in range(12)]],
            [[f"D{i+1}", *_mins[i]] for i in range(12)]) + """
Routes R3, R8 and R11 use articulated buses, and drivers D2 and D5 are not licensed to drive them.
Minimize the total minutes over all drivers and report that total.
""", f"""
from pyscipopt import Model, quicksum, SCIP_PARAMSETTING
minutes = {_mins!r}
N = range(12)
m = Model("buses")
x = {{(i, j): m.addVar(f"x_{{i}}_{{j}}", vtype="B", lb=0, ub=1) for i in N for j in N}}
for i in N:
    m.addCons(quicksum(x[i, j] for j in N) == 1)
for j in N:
    m.addCons(quicksum(x[i, j] for i in N) == 1)
for i in (1, 4):
    for j in (2, 7, 10):
        m.addCons(x[i, j] == 0)
m.setObjective(quicksum(minutes[i][j] * x[i, j] for i in N for j in N), "minimize")
""")

add(12, "integer", "scipy", 7, """
A fencing contractor cuts 12 m steel rails into posts of three lengths. This job needs at least
38 pieces of 5.5 m, 57 pieces of 3.5 m and 73 pieces of 2.5 m. The workshop only uses these
cutting patterns (pieces of 5.5 m / 3.5 m / 2.5 m per rail):
P1 = 2/0/0, P2 = 1/1/1, P3 = 1/0/2, P4 = 0/3/0, P5 = 0/2/2, P6 = 0/1/3, P7 = 0/0/4.
Each rail is cut with exactly one pattern and surplus pieces are allowed. What is the minimum
number of rails needed?
""", """
import numpy as np
from scipy.optimize import milp, LinearConstraint, Bounds
SENSE = 1  # minimize
patterns = np.array([[2, 0, 0], [1, 1, 1], [1, 0, 2], [0, 3, 0], [0, 2, 2], [0, 1, 3], [0, 0, 4]]).T
need = np.array([38, 57, 73])
c = np.ones(7)
integrality = np.ones(7)
res = milp(SENSE * c, constraints=[LinearConstraint(patterns, lb=need, ub=np.inf)],
           bounds=Bounds(0, np.inf), integrality=integrality)
""")

add(13, "lp", "highspy", 18, """
A hydro reservoir plans releases for the next six months. It starts with 120 million m^3 stored.
Forecast inflows (million m^3) for months 1-6 are 42, 55, 61, 38, 24, 19. Each month water leaves
either through the turbines (at most 60 million m^3 per month) or over the spillway (unlimited,
earns nothing). Turbine releases earn $31k, $28k, $25k, $35k, $44k and $47k per million m^3 in
months 1-6. Storage at the end of every month must stay between 80 and 200 million m^3, the end
of month 6 must hold at least as much as the start, and the river below needs a total release
(turbines plus spill) of at least 20 million m^3 every month. Maximize total revenue and report
it in thousands of dollars.
""", """
import highspy
inflow = [42, 55, 61, 38, 24, 19]
price = [31, 28, 25, 35, 44, 47]
h = highspy.Highs()
h.setOptionValue("output_flag", False)
r = [h.addVariable(lb=0, ub=60) for _ in range(6)]
s = [h.addVariable(lb=0) for _ in range(6)]
v = [h.addVariable(lb=80, ub=200) for _ in range(6)]
for t in range(6):
    prev = 120 if t == 0 else v[t - 1]
    h.addConstr(v[t] == prev + inflow[t] - r[t] - s[t])
    h.addConstr(r[t] + s[t] >= 20)
h.addConstr(v[5] >= 120)
h.maximize(sum(price[t] * r[t] for t in range(6)))
""")

add(14, "lp", "scipy", 3, """
A hiking club plans one day's food per hiker from lentils, rice and hard cheese, priced at $0.35,
$0.22 and $1.60 per 100 g. Per 100 g, lentils give 9 g protein, 116 kcal and 2 mg sodium; rice
gives 2.7 g protein, 130 kcal and 1 mg sodium; cheese gives 25 g protein, 400 kcal and 620 mg
sodium. Each hiker needs at least 60 g protein and at least 2,000 kcal, the doctor caps sodium
at 900 mg, and the pack limit is 1.2 kg of food in total. Find the cheapest menu and report its
cost in dollars, or "infeasible" if the requirements cannot all be met.
""", """
import numpy as np
from scipy.optimize import linprog
SENSE = 1  # minimize
c = np.array([0.35, 0.22, 1.60])  # per 100 g unit
A_ub = np.array([[-9, -2.7, -25], [-116, -130, -400], [2, 1, 620], [1, 1, 1]])
b_ub = np.array([-60, -2000, 900, 12])
res = linprog(SENSE * c, A_ub=A_ub, b_ub=b_ub, bounds=[(0, None)] * 3, method="highs")
""")

add(15, "lp", "pulp", 3, """
A recycling plant earns a credit of $45 per tonne of plastic and $12 per tonne of glass it
recovers, and pays $30 per tonne of residue it sends to landfill. Plastic recovered can exceed
twice the glass recovered by at most 15 tonnes (sorting-line balance), and residue is between 10%
and 25% of the plastic plus glass recovered. Nothing else limits the plant. Maximize the net credit;
answer with the value in dollars, or "unbounded"/"infeasible" as appropriate.
""", """
import pulp
prob = pulp.LpProblem("recycling", pulp.LpMaximize)
p = pulp.LpVariable("plastic", lowBound=0)
g = pulp.LpVariable("glass", lowBound=0)
z = pulp.LpVariable("residue", lowBound=0)
prob += 45 * p + 12 * g - 30 * z
prob += p - 2 * g <= 15
prob += z >= 0.1 * (p + g)
prob += z <= 0.25 * (p + g)
""")

# 16: nurse rota with dissatisfaction scores
_rng = np.random.default_rng(16)
_pref = [[int(v) for v in row] for row in _rng.integers(0, 10, (7, 7))]
_need = [4, 4, 3, 4, 5, 5, 3]
_days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
add(16, "binary", "pulp", 49, """
A rehabilitation clinic builds next week's rota for seven nurses (N1-N7). Nurses needed each day,
Mon-Sun: """ + ", ".join(str(v) for v in _need) + """. Each nurse works at least 3 and at most 5
days. N3 is on a course on Wednesday and Thursday and cannot work those days. A nurse who works
on Saturday must also work on the Sunday (weekends are worked as a pair). Each nurse scored how
much she dislikes working each day (0 = happy, 9 = very unhappy):
""" + table(["", *_days], [[f"N{i+1}", *_pref[i]] for i in range(7)]) + """
More nurses than needed may work on a day. Minimize the total dislike score of the rota and
report it.
""", f"""
import pulp
pref = {_pref!r}
need = {_need!r}
N, D = range(7), range(7)
prob = pulp.LpProblem("rota", pulp.LpMinimize)
w = {{(n, d): pulp.LpVariable(f"w_{{n}}_{{d}}", lowBound=0, upBound=1, cat="Binary") for n in N for d in D}}
prob += pulp.lpSum(pref[n][d] * w[n, d] for n in N for d in D)
for d in D:
    prob += pulp.lpSum(w[n, d] for n in N) >= need[d]
for n in N:
    prob += pulp.lpSum(w[n, d] for d in D) >= 3
    prob += pulp.lpSum(w[n, d] for d in D) <= 5
    prob += w[n, 5] <= w[n, 6], f"weekend_{{n}}"
prob += w[2, 2] == 0
prob += w[2, 3] == 0
""")

add(17, "milp", "pyscipopt", 6, """
A tofu workshop makes firm tofu, silken tofu and tempeh in whole batches. Profit per batch is
$380, $290 and $450; soybeans per batch are 120 kg, 90 kg and 100 kg, and 1,500 kg of soybeans are
available this week. Firm and silken tofu need 3 and 2 press-hours per batch (36 press-hours
available); tempeh needs 5 hours in the fermentation room per batch (30 hours available). Making a
product at all this week incurs a one-off setup cost of $400 (firm), $350 (silken) or $600
(tempeh). Maximize the week's profit after setup costs and report it in dollars.
""", """
from pyscipopt import Model, quicksum, SCIP_PARAMSETTING
profit = [380, 290, 450]
soy = [120, 90, 100]
setup = [400, 350, 600]
m = Model("tofu")
b = [m.addVar(f"batches_{k}", vtype="I", lb=0) for k in range(3)]
y = [m.addVar(f"setup_{k}", vtype="B", lb=0, ub=1) for k in range(3)]
m.addCons(quicksum(soy[k] * b[k] for k in range(3)) <= 1500)
m.addCons(3 * b[0] + 2 * b[1] <= 36)
m.addCons(5 * b[2] <= 30)
for k in range(3):
    m.addCons(b[k] <= 20 * y[k])
m.setObjective(quicksum(profit[k] * b[k] - setup[k] * y[k] for k in range(3)), "maximize")
""")

add(18, "lp", "scipy", 18, """
A bicycle maker plans production for six months with demands of 120, 150, 210, 260, 190 and 110
bikes. Each month it can build up to 160 bikes on regular time at $180 each and up to 40 more on
overtime at $235 each. Bikes kept in stock cost $9 per bike for each month-end they are held. It
starts with 15 bikes in stock, demand must be met on time every month, and at least 25 bikes must
be in stock at the end of month 6. Minimize total production plus holding cost and report it in
dollars.
""", """
import numpy as np
from scipy.optimize import linprog
SENSE = 1  # minimize
T = 6
demand = [120, 150, 210, 260, 190, 110]
# variables: regular[0..5], overtime[6..11], stock[12..17]
c = np.array([180] * T + [235] * T + [9] * T, float)
A_eq = np.zeros((T, 3 * T))
b_eq = np.zeros(T)
for t in range(T):
    A_eq[t, t] = 1
    A_eq[t, T + t] = 1
    A_eq[t, 2 * T + t] = -1
    if t > 0:
        A_eq[t, 2 * T + t - 1] = 1
    b_eq[t] = demand[t] - (15 if t == 0 else 0)
bounds = [(0, 160)] * T + [(0, 40)] * T + [(0, None)] * (T - 1) + [(25, None)]
res = linprog(SENSE * c, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs")
""")

add(19, "nlp", "scipy", 2, """
A drone-delivery company will build one hub on a flat region to serve six villages. Village
coordinates (km) and weekly parcel counts: A (0, 0) 120 parcels; B (14, 3) 80; C (6, 11) 150;
D (19, 15) 60; E (3, 18) 90; F (11, 7) 200. Each parcel is flown straight from the hub to its
village. Place the hub anywhere in the plane to minimize the total weekly parcel-kilometres
(parcels times straight-line distance, summed over villages) and report that minimum.
""", """
import numpy as np
from scipy.optimize import minimize
pts = np.array([[0, 0], [14, 3], [6, 11], [19, 15], [3, 18], [11, 7]], float)
w = np.array([120, 80, 150, 60, 90, 200], float)
f = lambda p: float(np.sum(w * np.hypot(*(pts - p).T)))
best = None
for start in [w @ pts / w.sum(), *pts]:
    res = minimize(f, start, method="Nelder-Mead",
                   options={"xatol": 1e-9, "fatol": 1e-9, "maxiter": 20000})
    if best is None or res.fun < best.fun:
        best = res
submit(round(float(best.fun), 6))
""", footer="custom")

add(20, "qp", "pyscipopt", 4, """
A grid operator must dispatch three committed generators to meet exactly 610 MW for the next hour.
Hourly cost in dollars for output P (MW): G1 = 120 + 18.5 P + 0.012 P^2 with 50 <= P <= 300;
G2 = 90 + 21 P + 0.008 P^2 with 40 <= P <= 250; G3 = 200 + 16.2 P + 0.021 P^2 with
60 <= P <= 350. G3 is currently producing 110 MW and can ramp up by at most 50 MW within the
hour. Minimize the total hourly cost of the three units and report it in dollars.
""", """
from pyscipopt import Model, SCIP_PARAMSETTING
m = Model("dispatch")
p1 = m.addVar("p1", lb=50, ub=300)
p2 = m.addVar("p2", lb=40, ub=250)
p3 = m.addVar("p3", lb=60, ub=350)
cost = m.addVar("cost", lb=None)
m.addCons(p1 + p2 + p3 == 610)
m.addCons(p3 <= 110 + 50)
m.addCons(cost >= 120 + 18.5 * p1 + 0.012 * p1 * p1 + 90 + 21 * p2 + 0.008 * p2 * p2
          + 200 + 16.2 * p3 + 0.021 * p3 * p3)
m.setObjective(cost, "minimize")
""")

add(21, "lp", "highspy", 4, """
A seed merchant blends exactly 1,000 kg of sports-turf mix from four seed lots:
ryegrass A ($3.10/kg, 92% germination, 450 kg in stock), ryegrass B ($2.60/kg, 84%, 600 kg),
fescue ($4.20/kg, 88%, 300 kg) and bluegrass ($6.80/kg, 79%, 250 kg).
Ryegrass (A and B together) must make up between 40% and 65% of the blend by weight, bluegrass at
least 15%, fescue at least 10%, and the blend's weight-averaged germination rate must be at least
87%. Minimize the cost of the blend and report it in dollars.
""", """
import highspy
cost = [3.10, 2.60, 4.20, 6.80]
germ = [92, 84, 88, 79]
stock = [450, 600, 300, 250]
h = highspy.Highs()
h.setOptionValue("output_flag", False)
x = [h.addVariable(lb=0, ub=stock[k]) for k in range(4)]
h.addConstr(x[0] + x[1] + x[2] + x[3] == 1000)
h.addConstr(x[0] + x[1] >= 400)
h.addConstr(x[0] + x[1] <= 650)
h.addConstr(x[3] >= 150)
h.addConstr(x[2] >= 100)
h.addConstr(sum(germ[k] * x[k] for k in range(4)) >= 87 * 1000)
h.minimize(sum(cost[k] * x[k] for k in range(4)))
""")

add(22, "binary", "pyscipopt", 12, """
A small college schedules six exams (E1-E6) into two evening slots. Exams that share students
must be in different slots; the shared pairs are E1-E2, E2-E3, E1-E3, E3-E4, E4-E5 and E5-E6.
Every exam takes exactly one slot. Putting an exam in slot 2 costs $150 in extra invigilation
(slot 1 costs nothing). Minimize the extra invigilation cost and report it in dollars, or answer
"infeasible" if no valid timetable exists.
""", """
from pyscipopt import Model, quicksum, SCIP_PARAMSETTING
pairs = [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (4, 5)]
m = Model("exams")
x = {(e, s): m.addVar(f"x_{e}_{s}", vtype="B", lb=0, ub=1) for e in range(6) for s in range(2)}
for e in range(6):
    m.addCons(x[e, 0] + x[e, 1] == 1)
for a, b in pairs:
    for s in range(2):
        m.addCons(x[a, s] + x[b, s] <= 1)
m.setObjective(quicksum(150 * x[e, 1] for e in range(6)), "minimize")
""")

add(23, "lp", "scipy", 2, """
A gaming cafe sells PC hours (profit $4 per hour) and console hours (profit $3 per hour). Its
licence says PC hours in a day may exceed console hours by at most 30, and console hours may not
exceed twice the PC hours plus 10. Treat hours as continuous and assume no other restriction.
Maximize daily profit; answer with the amount in dollars, or "unbounded"/"infeasible" as
appropriate.
""", """
import numpy as np
from scipy.optimize import linprog
SENSE = -1  # maximize
c = np.array([4.0, 3.0])
A_ub = np.array([[1, -1], [-2, 1]])
b_ub = np.array([30, 10])
res = linprog(SENSE * c, A_ub=A_ub, b_ub=b_ub, bounds=[(0, None)] * 2, method="highs")
""")

add(24, "lp", "pyscipopt", 3, """
A rooftop greenhouse of 1,200 m^2 grows lettuce, peppers and basil. Profit per m^2 per season:
lettuce $14, peppers $22, basil $31. Weekly water use per m^2: 3 L, 6 L and 4 L, with 5,000 L per
week available. Labour per m^2 per season: 0.08 h, 0.15 h and 0.25 h, with 160 h available. The
restaurant buyer takes at most 300 m^2 worth of peppers, and the grower wants basil to occupy at
most 20% of the planted area (the area actually planted, not the whole roof). Not all the roof
has to be planted. Maximize seasonal profit and report it in dollars.
""", """
from pyscipopt import Model, SCIP_PARAMSETTING
m = Model("greenhouse")
l = m.addVar("lettuce", lb=0)
p = m.addVar("peppers", lb=0, ub=300)
b = m.addVar("basil", lb=0)
m.addCons(l + p + b <= 1200)
m.addCons(3 * l + 6 * p + 4 * b <= 5000)
m.addCons(0.08 * l + 0.15 * p + 0.25 * b <= 160)
m.addCons(b <= 0.2 * (l + p + b))
m.setObjective(14 * l + 22 * p + 31 * b, "maximize")
""")
