import sys

from syncer.cli import main

sys.exit(main())
