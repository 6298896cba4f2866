//go:build faults

package faults

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// proxyMode is what the fault proxy does with a connection.
type proxyMode int

const (
	pass   proxyMode = iota // forward both ways
	refuse                  // close it at once: the gateway is down
	hang                    // accept it and never answer
	lag                     // forward it after a delay: a slow gateway
)

// faultProxy is a TCP proxy in front of the gateway whose behaviour the
// test switches. A switch closes the connections it holds, so that the
// client's kept-alive connections see the new mode too.
type faultProxy struct {
	ln       net.Listener
	upstream string

	mu    sync.Mutex
	mode  proxyMode
	delay time.Duration
	conns map[net.Conn]bool
}

func startProxy(t *testing.T, upstream string) *faultProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		_ = ln.Close()
		p.set(refuse, 0)
	})
	go p.serve()
	return p
}

func (p *faultProxy) URL() string { return "http://" + p.ln.Addr().String() }

// set switches the mode (delay is lag's) and drops the open connections.
func (p *faultProxy) set(m proxyMode, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode, p.delay = m, delay
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

func (p *faultProxy) track(c net.Conn) (proxyMode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = true
	return p.mode, p.delay
}

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *faultProxy) handle(c net.Conn) {
	mode, delay := p.track(c)
	switch mode {
	case refuse:
		_ = c.Close()
		return
	case hang:
		// Read and drop until the client gives up or the mode changes.
		_, _ = io.Copy(io.Discard, c)
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[up] = true
	p.mu.Unlock()
	if mode == lag {
		// Each request is held back by delay before it goes on (the
		// answer then comes as fast as the gateway gives it).
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					time.Sleep(delay)
					if _, werr := up.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			_ = up.Close()
		}()
	} else {
		go func() {
			_, _ = io.Copy(up, c)
			_ = up.Close()
		}()
	}
	_, _ = io.Copy(c, up)
	_ = c.Close()
}
