"""Entry point of a worker process: ``python -m autotune.measure._worker_main FD HANDLER``.

Kept apart from :mod:`.worker` so that running it as ``__main__`` does not load a second copy
of a module the package has already imported.
"""
from __future__ import annotations

import sys

from autotune.measure.worker import serve

if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2])
