"""`python -m engine.testing DIR`: build a tiny model pair under DIR and print the two environment lines that use it."""
import sys

from engine.testing import build_tiny_pair

home, toml = build_tiny_pair(sys.argv[1] if len(sys.argv) > 1 else "tiny-pair")
print(f"export CODECUE_HOME={home.resolve()}")
print(f"export CODECUE_MODELS_TOML={toml.resolve()}")
