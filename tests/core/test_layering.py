"""House rule: evalcore never imports Ray, not even transitively."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_no_evalcore_module_imports_ray():
    probe = textwrap.dedent(
        """
        import importlib, pkgutil, sys
        import evalcore
        names = [m.name for m in pkgutil.walk_packages(evalcore.__path__, "evalcore.")
                 if ".data.reference" not in m.name and not m.name.endswith(("._build", ".__main__"))]
        for name in names:
            importlib.import_module(name)
        leaked = sorted(m for m in sys.modules if m == "ray" or m.startswith("ray."))
        print(len(names), leaked)
        assert not leaked, leaked
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    count = int(out.stdout.split()[0])
    assert count >= 30, f"only {count} evalcore modules were imported: the walk is broken"
