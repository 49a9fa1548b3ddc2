"""A child process for the benchmarks' worker runner: holds ``argv[1]`` MiB in memory, then prints
a JSON line."""

import json
import sys

import numpy as np

block = np.ones(int(sys.argv[1]) * 2**20 // 8)
print("not json")
print(json.dumps({"sum": float(block.sum())}))
