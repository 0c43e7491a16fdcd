"""`python -m gpufeed ...` runs the gpufeed command-line tool (see gpufeed._cli)."""

import sys

from gpufeed._cli import main

sys.exit(main())
