//go:build !unix

package httpgateway

// watch has nothing to ready here: quiet cannot peek at a socket, so a
// connection the server closed is found when a request fails on it, and
// the request is sent again where net/http would.
func (c *h1Conn) watch() {}

func (c *h1Conn) quiet() bool { return true }
