"""``python -m tvm_pim``: see :mod:`tvm_pim.cli`."""

import sys

from .cli import main

sys.exit(main())
