//go:build unix && !aix

package httpgateway

import (
	"crypto/tls"
	"errors"
	"syscall"
)

// watch readies quiet for c's connection, once: its socket, under TLS
// too, and the peek bound as a function, so that a check allocates
// nothing.
func (c *h1Conn) watch() {
	c.quietFn = c.peek
	nc := c.nc
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			c.raw = rc
		}
	}
}

// quiet reports whether c, idle, can carry a request: its peer has neither
// closed it nor sent anything since its last reply. One non-blocking peek
// at the socket, the check net/http's reading goroutine makes by waiting;
// over TLS, tlsQuiet after it. The peek sees records, not bytes of a
// reply: a session ticket sent late reads as not quiet too, which costs a
// new connection, never a reply.
func (c *h1Conn) quiet() bool {
	if c.raw == nil {
		return true
	}
	if err := c.raw.Read(c.quietFn); err != nil || !c.quietOK {
		return false
	}
	if _, ok := c.nc.(*tls.Conn); ok {
		return c.tlsQuiet()
	}
	return true
}

// peek is quiet's look at the socket.
func (c *h1Conn) peek(fd uintptr) bool {
	_, _, err := syscall.Recvfrom(int(fd), c.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	// Nothing to read (EAGAIN) is the only quiet answer: data, an EOF (no
	// error, no byte) or a reset each end the connection.
	c.quietOK = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
	return true // never wait for the socket
}
