"""DASH stack: media generation, MPD, ABR, player, QoE (pure) and server/transports (I/O)."""
