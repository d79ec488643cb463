package app

// HTTPAddr returns the address the HTTP server listens on: the tests
// listen on port 0.
func (a *App) HTTPAddr() string { return a.ln.Addr().String() }
