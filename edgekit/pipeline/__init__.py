"""Build stages (load → export → import → lower+compile → package), the frontends by source
kind that supply the stages up to import (frontends/), the plan check and the content-addressed
build cache."""
