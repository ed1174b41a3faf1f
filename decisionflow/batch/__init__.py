"""Batch files: input rows read from JSONL, CSV or Parquet, and resumable JSONL output for file runs.

`input_files` reads and checks the rows (ids, text keys, formats); `resumable_jsonl` decides a file
with the engine, writing one record per row so that an interrupted run resumes where it stopped, and
checks that an output is this run's own before anything is written. `decisionflow run` and the Ray
Data path (`decisionflow.scale`) both write through it.
"""
