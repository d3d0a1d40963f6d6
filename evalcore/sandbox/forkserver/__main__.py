"""``python -m evalcore.sandbox.forkserver --ctl-fd N``: what :class:`evalcore.sandbox.ForkServer` starts."""
from evalcore.sandbox.forkserver.main import main

if __name__ == "__main__":
    main()
