"""HTTP clients behind the player's fetch seam (``core.fetch``): HTTP/1.1 heads, the transports, quic-go,
racing's I/O side, a browser's cache."""
