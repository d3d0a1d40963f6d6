"""Hand-made completions shared by the extraction and regrade tests. (The fake OpenAI-compatible
server and its ``fake_server`` / ``make_response`` fixtures are in tests/servers/openai_fake.py and
tests/conftest.py.)"""
from __future__ import annotations

import pytest

COPT_LP = '''import coptpy as cp
from coptpy import COPT

env = cp.Envr()
{name} = env.createModel("lp")
x = {name}.addVar(lb=0, name="x")
y = {name}.addVar(lb=0, name="y")
{name}.addConstr(x + y <= 4)
{name}.addConstr(x + 3 * y <= 6)
{extra}
{name}.setObjective(3 * x + 2 * y, COPT.MAXIMIZE)
{name}.solve()
'''


def copt_completion(name: str = "model", infeasible: bool = False) -> str:
    """An ORLM-style completion: prose, a ```python coptpy block (optimum 12), prose."""
    extra = f"{name}.addConstr(x + y >= 5)" if infeasible else ""
    code = COPT_LP.format(name=name, extra=extra)
    return f"Let x, y be the amounts.\n\n```python\n{code}```\n\nThe model is solved above."


SYNTAX_ERROR_COMPLETION = "Here is the code:\n```python\nimport coptpy as cp\nmodel = cp.Envr().createModel(\nprint('x'\n```\n"
NO_CODE_COMPLETION = "The optimal value is 12, obtained by producing 4 units of x."


@pytest.fixture
def completions():
    return {
        "copt": copt_completion,
        "syntax_error": SYNTAX_ERROR_COMPLETION,
        "no_code": NO_CODE_COMPLETION,
    }
