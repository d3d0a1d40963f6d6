"""``python -m opteval.evalcore.sandbox.forkserver --ctl-fd N``: what :class:`opteval.evalcore.sandbox.ForkServer` starts."""
from opteval.evalcore.sandbox.forkserver.main import main

if __name__ == "__main__":
    main()
