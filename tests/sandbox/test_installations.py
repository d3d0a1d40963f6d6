"""The sandbox must work whatever Python installation runs it: a venv under /tmp (hidden by
the per-run private /tmp unless bound back), and the no-namespace fallback where a
throwaway uid cannot reach an installation under /root."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PULP_LP = (
    "import pulp\n"
    "p = pulp.LpProblem('t', pulp.LpMaximize)\n"
    "x = pulp.LpVariable('x', 0, 4); y = pulp.LpVariable('y', 0, 3)\n"
    "p += 3 * x + 2 * y\n"
    "p += x + y <= 5\n"
    "p.solve(pulp.PULP_CBC_CMD(msg=0))\n"
    "submit(pulp.value(p.objective))\n"
)
PROBE = (
    "import json, sys\n"
    "from opteval.evalcore.sandbox import run_program\n"
    "r = run_program(sys.argv[1])\n"
    "print(json.dumps({'outcome': r.outcome, 'submission': r.submission, 'contained': r.contained,\n"
    "                  'stderr': r.stderr[-800:], 'note': r.note}))\n"
)


def _probe(python: str, code: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([python, "-c", PROBE, code], cwd=REPO, capture_output=True, text=True, timeout=180,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _inherit_site_packages(py: str) -> None:
    """Make the running environment's packages (pulp, ...) visible in the new venv.

    ``--system-site-packages`` only exposes the *base* interpreter's packages; when pytest
    itself runs from a venv (the README's fresh-clone setup) pulp lives in that venv, so we
    add its site directories with a ``.pth`` (``site.addsitedir`` also runs their ``.pth``
    files, e.g. an editable install)."""
    import site
    import sysconfig

    ours = [p for p in dict.fromkeys(site.getsitepackages() + [sysconfig.get_paths()["purelib"]]) if os.path.isdir(p)]
    target = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                            capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "_outer_env.pth"), "w") as f:
        f.write("import site; " + "; ".join(f"site.addsitedir({p!r})" for p in ours) + "\n")


def test_a_venv_under_tmp_runs_solvers_contained():
    with tempfile.TemporaryDirectory(prefix="opteval-venv-", dir="/tmp") as d:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", d],
                       check=True, timeout=120)
        py = os.path.join(d, "bin", "python")
        _inherit_site_packages(py)
        r = _probe(py, PULP_LP + "import sys\nassert sys.prefix.startswith('/tmp/'), sys.prefix\n")
        assert (r["outcome"], r["submission"], r["contained"]) == ("ok", 14.0, True), r
        r = _probe(py, f"open({os.path.join(d, 'planted')!r}, 'w')")
        assert r["outcome"] == "error" and ("Read-only file system" in r["stderr"] or "Permission denied" in r["stderr"]), r


def test_fallback_without_namespaces_still_runs_cbc():
    r = _probe(sys.executable, PULP_LP, env={"OPTEVAL_SANDBOX_NAMESPACES": "0"})
    assert (r["outcome"], r["submission"], r["contained"]) == ("ok", 14.0, False), r
    assert "NOT CONTAINED" in r["note"]
