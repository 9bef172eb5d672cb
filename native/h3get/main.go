// nest-h3get: the DASH player's HTTP/3 fetcher on quic-go.
//
// The player (nest_experiments.dash.http.quicgo) starts it in the client's
// namespace, with the origin on the command line. It opens one QUIC
// connection at once, then prints {"ready": ...} (or {"error": ...} and exits
// 1). Requests arrive on stdin, one per line: "ID PATH KEEP" (KEEP -1: return
// the whole body, for the MPD; N > 0: its first N bytes, a segment's boxes;
// 0: none). Each runs on its own stream, concurrently; its
// result is one JSON line on stdout with CLOCK_MONOTONIC seconds (the clock
// of Python's time.monotonic()): request sent, response headers received,
// last body byte received. End of stdin closes the connection at once (requests in flight are
// abandoned) and exits 0. With -qlog FILE, the connection's loss recovery (quic-go's recovery:*
// qlog events: metrics, losses, PTO counts; no packet events) is written to FILE as JSON-SEQ,
// complete when it exits (nest_experiments.parsers.qlog reads it).
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlogwriter"
	"golang.org/x/sys/unix"
)

// recoveryTrace keeps only the recovery events of a qlog trace.
type recoveryTrace struct{ inner qlogwriter.Trace }

func (t recoveryTrace) AddProducer() qlogwriter.Recorder {
	r := t.inner.AddProducer()
	if r == nil {
		return nil
	}
	return recoveryRecorder{r}
}

type recoveryRecorder struct{ qlogwriter.Recorder }

func (r recoveryRecorder) RecordEvent(e qlogwriter.Event) {
	if strings.HasPrefix(e.Name(), "recovery:") {
		r.Recorder.RecordEvent(e)
	}
}

// qlogFile is the trace's buffered file; done closes when the trace has written its last event.
type qlogFile struct {
	f    *os.File
	w    *bufio.Writer
	once sync.Once
	done chan struct{}
}

func (q *qlogFile) Write(p []byte) (int, error) { return q.w.Write(p) }

func (q *qlogFile) Close() error {
	err := q.w.Flush()
	if cerr := q.f.Close(); err == nil {
		err = cerr
	}
	q.once.Do(func() { close(q.done) })
	return err
}

// recoveryTracer writes the (one) client connection's recovery events to path.
func recoveryTracer(path string, file **qlogFile) func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	return func(_ context.Context, isClient bool, connID quic.ConnectionID) qlogwriter.Trace {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "qlog:", err)
			return nil
		}
		*file = &qlogFile{f: f, w: bufio.NewWriter(f), done: make(chan struct{})}
		seq := qlogwriter.NewConnectionFileSeq(*file, isClient, connID)
		go seq.Run()
		return recoveryTrace{seq}
	}
}

type result struct {
	ID       int64   `json:"id"`
	Status   int     `json:"status,omitempty"`
	Bytes    int64   `json:"bytes"`
	TRequest float64 `json:"t_request,omitempty"`
	TFirst   float64 `json:"t_first,omitempty"`
	TLast    float64 `json:"t_last,omitempty"`
	Body     []byte  `json:"body,omitempty"`
	Error    string  `json:"error,omitempty"`
}

type output struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *output) send(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		line, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(line)
	o.w.WriteByte('\n')
	o.w.Flush()
}

func monotonic() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

func quicGoVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/quic-go/quic-go" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func tlsConfig(caFile, serverName string, insecure bool) (*tls.Config, error) {
	conf := &tls.Config{ServerName: serverName, NextProtos: []string{http3.NextProtoH3}, InsecureSkipVerify: insecure}
	if caFile != "" && !insecure {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", caFile)
		}
		conf.RootCAs = pool
	}
	return conf, nil
}

func fetch(cc *http3.ClientConn, authority string, id int64, path string, keep int64, buf []byte) result {
	r := result{ID: id}
	req, err := http.NewRequest(http.MethodGet, "https://"+authority+path, nil)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.TRequest = monotonic()
	resp, err := cc.RoundTrip(req)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer resp.Body.Close()
	r.TFirst = monotonic()
	r.TLast = r.TFirst
	r.Status = resp.StatusCode
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			r.TLast = monotonic()
			r.Bytes += int64(n)
			if keep < 0 {
				r.Body = append(r.Body, buf[:n]...)
			} else if room := keep - int64(len(r.Body)); room > 0 {
				r.Body = append(r.Body, buf[:min(int64(n), room)]...)
			}
		}
		if errors.Is(err, io.EOF) {
			return r
		}
		if err != nil {
			r.Error = err.Error()
			return r
		}
	}
}

func main() {
	host := flag.String("host", "", "origin address")
	port := flag.Int("port", 443, "origin UDP port")
	caFile := flag.String("ca", "", "CA certificate (PEM)")
	insecure := flag.Bool("insecure", false, "do not verify the certificate")
	serverName := flag.String("server-name", "", "TLS SNI and verification name (default: host)")
	window := flag.Uint64("window", 64<<20, "QUIC connection and stream receive windows, bytes")
	connectTimeout := flag.Duration("connect-timeout", 10*time.Second, "handshake timeout")
	idleTimeout := flag.Duration("idle-timeout", 30*time.Second, "QUIC idle timeout")
	version := flag.Bool("version", false, "print the quic-go version and exit")
	qlogPath := flag.String("qlog", "", "write the connection's recovery events (qlog JSON-SEQ) to this file")
	flag.Parse()
	out := &output{w: bufio.NewWriter(os.Stdout)}
	if *version {
		fmt.Println("quic-go", quicGoVersion())
		return
	}
	if *serverName == "" {
		*serverName = *host
	}
	tlsConf, err := tlsConfig(*caFile, *serverName, *insecure)
	if err != nil {
		out.send(map[string]string{"error": err.Error()})
		os.Exit(1)
	}
	quicConf := &quic.Config{
		InitialStreamReceiveWindow:     *window,
		MaxStreamReceiveWindow:         *window,
		InitialConnectionReceiveWindow: *window,
		MaxConnectionReceiveWindow:     *window,
		MaxIdleTimeout:                 *idleTimeout,
		MaxIncomingStreams:             -1,
	}
	var qlog *qlogFile
	if *qlogPath != "" {
		quicConf.Tracer = recoveryTracer(*qlogPath, &qlog)
	}
	authority := net.JoinHostPort(*host, strconv.Itoa(*port))
	ctx, cancel := context.WithTimeout(context.Background(), *connectTimeout)
	conn, err := quic.DialAddr(ctx, authority, tlsConf, quicConf)
	cancel()
	if err != nil {
		out.send(map[string]string{"error": "QUIC handshake with " + authority + ": " + err.Error()})
		os.Exit(1)
	}
	tr := &http3.Transport{}
	cc := tr.NewClientConn(conn)
	out.send(map[string]string{"ready": "quic-go " + quicGoVersion()})

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) != 3 {
			out.send(map[string]string{"error": "bad request line: " + in.Text()})
			continue
		}
		id, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			out.send(map[string]string{"error": "bad request id: " + fields[0]})
			continue
		}
		path := fields[1]
		keep, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			out.send(map[string]string{"error": "bad KEEP (a byte count, -1 for all): " + fields[2]})
			continue
		}
		go func() { out.send(fetch(cc, authority, id, path, keep, make([]byte, 256<<10))) }()
	}
	// end of input (the player closed, or died): abandon what is in flight
	conn.CloseWithError(0, "")
	if qlog != nil { // the trace ends with the connection: wait for its last events on disk
		select {
		case <-qlog.done:
		case <-time.After(2 * time.Second):
			fmt.Fprintln(os.Stderr, "qlog: not closed 2 s after the connection")
		}
	}
}
