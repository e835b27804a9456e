import sys

argv = sys.argv[1:]
if argv[:1] == ["map"]:                     # the course map: python -m llamanb.course map [...]
    from llamanb.course.chapters import main as map_main

    sys.exit(map_main(argv[1:]))
from llamanb.course.notebooks import main

sys.exit(main(argv))
