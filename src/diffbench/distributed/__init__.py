"""Scale on Ray: generation, evaluation, sweeps and load over several processes, GPUs and machines.

``ray`` is an optional extra (``pip install -c constraints.txt -e ".[ray]"``) and is imported only inside the
functions that need it: ``diffbench --help`` and the torch-free commands never import it.
"""
