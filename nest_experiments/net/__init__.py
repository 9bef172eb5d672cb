"""The system seam: everything that talks to the kernel or runs ``ip``/``tc``/``ss``/``nft``/``ethtool``.

``network``: the adapter (NeST, ip/tc/ethtool/sysctl; a realised topology);
``tcplan``, ``nftplan``, ``fwshape``: traffic-control and firewall plans as
argument lists (pure), applied with the exit status checked and read back;
``netlink``: netlink messages (pure: framing, qdisc dumps, HTB classes); ``rtnl``: netlink sockets in the
namespaces (HTB rate changes, qdisc dumps); ``mptcp``: MPTCP limits and
endpoints, planned, applied and read back; ``sockets``: ``ss`` in a
namespace; ``procs``: processes in namespaces, the run state and the locks;
``kernel``: the host kernel's features and tools (probes).
Nothing here imports apps, collectors, the runner or analysis.
"""
