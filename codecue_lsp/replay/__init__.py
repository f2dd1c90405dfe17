"""`codecue-replay`: typing traces for a completion server, and a harness that replays them against it.

    synth   real source files -> a typing trace (keystrokes, inline-completion requests, what was typed next)
    record  a transparent stdio proxy between an editor and the server that writes the editor's traffic as a trace
    run     drives a real server over stdio at the trace's timing and reports latency, timeliness and accuracy
            (and, sampled while it runs, server RSS and structure sizes: `--soak` judges them; soak.py);
            `--clients N` runs N simulated developers at once, each its own server process (clients.py)

Trace format (JSON lines; trace.py reads and writes it): `open`, `change`, `close`, `request`, `truth` events with a
time `t` in seconds and LSP positions in UTF-16 code units. Recorded traces add `meta` and `cancel` events.
"""
