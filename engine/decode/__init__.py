"""The speculative decode loop and what it needs: drafters, the drafting policy, sampling, caches, healing."""
