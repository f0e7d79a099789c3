"""`python -m harness.cli ...`, as the evidence scripts call it."""
import sys

from harness.cli import main

sys.exit(main())
