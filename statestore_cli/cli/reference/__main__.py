"""``python -m statestore_cli.cli.reference``: write the generated pages (``--check``: compare them)."""

import sys

from statestore_cli.cli.reference import main

sys.exit(main())
