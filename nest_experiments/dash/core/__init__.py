"""The sans-I/O player core: the session state machine and its driver, its events, the ABRs, the abandon rule,
the racing policies, QoE and the rows the players write (see ``dash/__init__``)."""
