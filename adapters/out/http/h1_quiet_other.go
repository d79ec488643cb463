//go:build !unix || aix

package httpgateway

import "crypto/tls"

// watch has nothing to ready here: quiet cannot peek at a socket, so a
// connection the server closed is found when a request fails on it, and
// the request is sent again where net/http would.
func (c *h1Conn) watch() {}

// quiet looks only at what crypto/tls holds (tlsQuiet).
func (c *h1Conn) quiet() bool {
	if _, ok := c.nc.(*tls.Conn); ok {
		return c.tlsQuiet()
	}
	return true
}
