import sys

from msglake.pipelines.cli import main

sys.exit(main())
