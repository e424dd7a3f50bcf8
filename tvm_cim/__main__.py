"""``python -m tvm_cim``: see :mod:`tvm_cim.cli`."""

import sys

from .cli import main

sys.exit(main())
