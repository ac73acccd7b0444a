"""``python -m contrastive_bert.cli``: the same entry point as the ``contrastive-bert`` script."""

import sys

from contrastive_bert.cli import main

sys.exit(main())
