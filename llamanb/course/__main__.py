import sys

from llamanb.course.notebooks import main

sys.exit(main())
