import sys

from llamanb.cli import main

sys.exit(main())
