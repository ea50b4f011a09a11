package scheduler

import (
	"net"
	"sync"
)

// Listener returns lis bounded to the scheduler's connections per peer
// (WithMaxConnectionsPerPeer): a connection from a remote IP address that
// already holds that many is closed as soon as it is accepted, before any
// HTTP/2 frame, so its client sees UNAVAILABLE (no status detail is
// possible at that point) and retries with backoff. Serve gRPC on the
// returned listener.
func (s *Server) Listener(lis net.Listener) net.Listener {
	if s.opts.maxConnsPerPeer <= 0 {
		return lis
	}
	return &peerLimitListener{Listener: lis, max: s.opts.maxConnsPerPeer, open: map[string]int{}, s: s}
}

type peerLimitListener struct {
	net.Listener
	max int
	s   *Server

	mu      sync.Mutex
	open    map[string]int // remote IP -> connections open
	refused int            // since the last log line
}

func (l *peerLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := c.RemoteAddr().String()
		if host, _, err := net.SplitHostPort(ip); err == nil {
			ip = host
		}
		l.mu.Lock()
		if l.open[ip] >= l.max {
			l.refused++
			if l.refused == 1 || l.refused%1000 == 0 {
				l.s.log.Warn("connection refused: too many from one peer", "peer", ip, "max_connections_per_peer", l.max, "refused", l.refused)
			}
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.open[ip]++
		l.mu.Unlock()
		return &peerConn{Conn: c, release: sync.OnceFunc(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[ip]--; l.open[ip] <= 0 {
				delete(l.open, ip)
			}
		})}, nil
	}
}

// peerConn gives its peer's slot back when closed.
type peerConn struct {
	net.Conn
	release func()
}

func (c *peerConn) Close() error {
	c.release()
	return c.Conn.Close()
}
