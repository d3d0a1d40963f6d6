"""One small MILP and one LP, written by hand in each of the seven libraries the sandbox captures.

MILP: maximize 5x + 4y + 3z  s.t.  2x + 3y + z <= 5,  4x + y + 2z <= 11,  3x + 4y + 2z <= 8,
      x, y integer in [0, 10], z continuous in [0, 3]  (optimum 13: x=2, y=0, z=1).
LP:   minimize 2a + 3b  s.t.  a + b >= 4,  a + 3b >= 6,  a - b == 1,  0 <= a <= 10, b >= 0
      (optimum 9.5: a=2.5, b=1.5).
"""
from __future__ import annotations

MILP_OPT = 13.0
LP_OPT = 9.5

MILP = {
    "pulp": """
import pulp
p = pulp.LpProblem("milp", pulp.LpMaximize)
x = pulp.LpVariable("x", 0, 10, cat="Integer"); y = pulp.LpVariable("y", 0, 10, cat="Integer")
z = pulp.LpVariable("z", 0, 3)
p += 5 * x + 4 * y + 3 * z
p += 2 * x + 3 * y + z <= 5
p += 4 * x + y + 2 * z <= 11
p += 3 * x + 4 * y + 2 * z <= 8
p.solve(pulp.PULP_CBC_CMD(msg=0))
submit(pulp.value(p.objective))
""",
    "pyscipopt": """
from pyscipopt import Model
m = Model(); m.hideOutput()
x = m.addVar("x", vtype="I", lb=0, ub=10); y = m.addVar("y", vtype="I", lb=0, ub=10)
z = m.addVar("z", vtype="C", lb=0, ub=3)
m.addCons(2 * x + 3 * y + z <= 5); m.addCons(4 * x + y + 2 * z <= 11); m.addCons(3 * x + 4 * y + 2 * z <= 8)
m.setObjective(5 * x + 4 * y + 3 * z, "maximize")
m.optimize()
submit(m.getObjVal())
""",
    "highspy": """
import highspy
h = highspy.Highs(); h.setOptionValue("output_flag", False)
inf = highspy.kHighsInf
h.addVars(3, [0, 0, 0], [10, 10, 3])
h.changeColsIntegrality(2, [0, 1], [highspy.HighsVarType.kInteger] * 2)
h.changeColsCost(3, [0, 1, 2], [5, 4, 3]); h.changeObjectiveSense(highspy.ObjSense.kMaximize)
h.addRow(-inf, 5, 3, [0, 1, 2], [2, 3, 1]); h.addRow(-inf, 11, 3, [0, 1, 2], [4, 1, 2])
h.addRow(-inf, 8, 3, [0, 1, 2], [3, 4, 2])
h.run()
submit(h.getInfo().objective_function_value)
""",
    "scipy.milp": """
import numpy as np
from scipy.optimize import milp, LinearConstraint, Bounds
A = np.array([[2, 3, 1], [4, 1, 2], [3, 4, 2]])
res = milp(c=-np.array([5, 4, 3]), constraints=LinearConstraint(A, -np.inf, [5, 11, 8]),
           integrality=[1, 1, 0], bounds=Bounds([0, 0, 0], [10, 10, 3]))
submit(-res.fun)
""",
    "scipy.linprog": """
from scipy.optimize import linprog
res = linprog(c=[-5, -4, -3], A_ub=[[2, 3, 1], [4, 1, 2], [3, 4, 2]], b_ub=[5, 11, 8],
              bounds=[(0, 10), (0, 10), (0, 3)], integrality=[1, 1, 0], method="highs")
submit(-res.fun)
""",
    "pyomo": """
from pyomo.environ import ConcreteModel, Var, Objective, Constraint, SolverFactory, NonNegativeIntegers, maximize, value
m = ConcreteModel()
m.x = Var(domain=NonNegativeIntegers, bounds=(0, 10)); m.y = Var(domain=NonNegativeIntegers, bounds=(0, 10))
m.z = Var(bounds=(0, 3))
m.obj = Objective(expr=5 * m.x + 4 * m.y + 3 * m.z, sense=maximize)
m.c1 = Constraint(expr=2 * m.x + 3 * m.y + m.z <= 5)
m.c2 = Constraint(expr=4 * m.x + m.y + 2 * m.z <= 11)
m.c3 = Constraint(expr=3 * m.x + 4 * m.y + 2 * m.z <= 8)
SolverFactory("glpk").solve(m)
submit(value(m.obj))
""",
    "gurobipy": """
import gurobipy as gp
m = gp.Model(); m.Params.OutputFlag = 0
x = m.addVar(0, 10, vtype="I", name="x"); y = m.addVar(0, 10, vtype="I", name="y"); z = m.addVar(0, 3, name="z")
m.addConstr(2 * x + 3 * y + z <= 5); m.addConstr(4 * x + y + 2 * z <= 11); m.addConstr(3 * x + 4 * y + 2 * z <= 8)
m.setObjective(5 * x + 4 * y + 3 * z, gp.GRB.MAXIMIZE)
m.optimize()
submit(m.ObjVal)
""",
    "coptpy": """
import coptpy as cp
env = cp.Envr(); m = env.createModel("milp"); m.setParam("Logging", 0)
x = m.addVar(0, 10, vtype=cp.COPT.INTEGER, name="x"); y = m.addVar(0, 10, vtype=cp.COPT.INTEGER, name="y")
z = m.addVar(0, 3, name="z")
m.addConstr(2 * x + 3 * y + z <= 5); m.addConstr(4 * x + y + 2 * z <= 11); m.addConstr(3 * x + 4 * y + 2 * z <= 8)
m.setObjective(5 * x + 4 * y + 3 * z, cp.COPT.MAXIMIZE)
m.solve()
submit(m.objval)
""",
}

LP = {
    "pulp": """
import pulp
p = pulp.LpProblem("lp", pulp.LpMinimize)
a = pulp.LpVariable("a", 0, 10); b = pulp.LpVariable("b", 0)
p += 2 * a + 3 * b
p += a + b >= 4
p += a + 3 * b >= 6
p += a - b == 1
p.solve(pulp.PULP_CBC_CMD(msg=0))
submit(pulp.value(p.objective))
""",
    "pyscipopt": """
from pyscipopt import Model
m = Model(); m.hideOutput()
a = m.addVar("a", lb=0, ub=10); b = m.addVar("b", lb=0, ub=None)
m.addCons(a + b >= 4); m.addCons(a + 3 * b >= 6); m.addCons(a - b == 1)
m.setObjective(2 * a + 3 * b, "minimize")
m.optimize()
submit(m.getObjVal())
""",
    "highspy": """
import highspy
h = highspy.Highs(); h.setOptionValue("output_flag", False)
inf = highspy.kHighsInf
h.addVars(2, [0, 0], [10, inf]); h.changeColsCost(2, [0, 1], [2, 3])
h.addRow(4, inf, 2, [0, 1], [1, 1]); h.addRow(6, inf, 2, [0, 1], [1, 3]); h.addRow(1, 1, 2, [0, 1], [1, -1])
h.run()
submit(h.getInfo().objective_function_value)
""",
    "scipy.milp": """
import numpy as np
from scipy.optimize import milp, LinearConstraint, Bounds
res = milp(c=[2, 3], constraints=[LinearConstraint([[1, 1], [1, 3]], [4, 6], np.inf),
                                  LinearConstraint([[1, -1]], 1, 1)],
           bounds=Bounds([0, 0], [10, np.inf]))
submit(res.fun)
""",
    "scipy.linprog": """
from scipy.optimize import linprog
res = linprog(c=[2, 3], A_ub=[[-1, -1], [-1, -3]], b_ub=[-4, -6], A_eq=[[1, -1]], b_eq=[1],
              bounds=[(0, 10), (0, None)])
submit(res.fun)
""",
    "pyomo": """
from pyomo.environ import ConcreteModel, Var, Objective, Constraint, SolverFactory, minimize, value
m = ConcreteModel()
m.a = Var(bounds=(0, 10)); m.b = Var(bounds=(0, None))
m.obj = Objective(expr=2 * m.a + 3 * m.b, sense=minimize)
m.c1 = Constraint(expr=m.a + m.b >= 4); m.c2 = Constraint(expr=m.a + 3 * m.b >= 6); m.c3 = Constraint(expr=m.a - m.b == 1)
SolverFactory("glpk").solve(m)
submit(value(m.obj))
""",
    "gurobipy": """
import gurobipy as gp
m = gp.Model(); m.Params.OutputFlag = 0
a = m.addVar(0, 10, name="a"); b = m.addVar(0, gp.GRB.INFINITY, name="b")
m.addConstr(a + b >= 4); m.addConstr(a + 3 * b >= 6); m.addConstr(a - b == 1)
m.setObjective(2 * a + 3 * b, gp.GRB.MINIMIZE)
m.optimize()
submit(m.ObjVal)
""",
    "coptpy": """
import coptpy as cp
env = cp.Envr(); m = env.createModel("lp"); m.setParam("Logging", 0)
a = m.addVar(0, 10, name="a"); b = m.addVar(0, cp.COPT.INFINITY, name="b")
m.addConstr(a + b >= 4); m.addConstr(a + 3 * b >= 6); m.addConstr(a - b == 1)
m.setObjective(2 * a + 3 * b, cp.COPT.MINIMIZE)
m.solve()
submit(m.objval)
""",
}
