import sys

from kvscope.app.cli.main import main

sys.exit(main())
