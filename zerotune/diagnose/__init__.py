"""`zerotune diagnose`: read a failed or slow DeepSpeed run's log, name the cause, propose a fix.

scan.py streams the log through the signal table (signals/: one module per source, filling the
records of records.py; signals/frames.py places a failure no message names by its traceback), causes/
is the ordered cause table (__init__.py) that picks one primary cause, with the rows' checks grouped by
family (setup, memory, collectives, training, stopped), advice/ the fix each cause gives (same families),
explain.py rebuilds the job and runs the memory and step models on it, fix_search.py searches the
smallest config change that fits, rejected.py lints a config DeepSpeed refused, analyse.py runs the
whole pipeline and report.py is the --json schema. zerotune.render.diagnose renders the report.
Pure core: no torch/deepspeed, and nothing here imports zerotune.cli (but one TODO in explain.py).
"""
