// caddy: Caddy with its standard modules, built from the Go module proxy at
// the version go.mod pins (what xcaddy generates for a plain build).
//
// Debian 12's caddy (2.6.2) carries a quic-go of 2022 that sends every QUIC
// packet with its own sendmsg; this one's quic-go uses UDP GSO, which roughly
// halved the server's CPU per byte over h3 in the TCG guest
// (bench/player_cpu.py). ./setup.sh builds it into the venv's bin, and the
// DASH app prefers it to the caddy on PATH.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func main() {
	caddycmd.Main()
}
