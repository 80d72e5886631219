// Package devstack runs the local Temporal stack behind `retrain dev`: a
// complete Temporal server (frontend, history, matching and worker services)
// inside the calling process, persisting to one SQLite file, plus the
// Temporal Web UI, started and stopped from Go.
//
//	s, err := devstack.Start(ctx, devstack.Options{DataDir: dir, Port: 7233})
//	...
//	c, err := client.Dial(client.Options{HostPort: s.FrontendAddress(), Namespace: s.Namespace()})
//	...
//	defer s.Stop()
//
// It is built on the server's public Go API (go.temporal.io/server/temporal)
// and ui-server v2 with embedded assets; it needs no network and downloads
// nothing.
//
// # Development only
//
// The stack is for one developer's machine and for tests: one history shard,
// no authentication, no TLS, rate limits lifted (see dynamicconfig.go), and
// relaxed durability (below). The production worker binary
// (cmd/retrain-worker) connects to a real Temporal cluster and must not
// import this package; importing it also links the whole Temporal server and
// Web UI into the binary.
//
// # Storage and durability
//
// Persistence and visibility share one SQLite database at
// DataDir/temporal.db in WAL mode with synchronous=NORMAL. A committed write
// is in the write-ahead log before the server acknowledges it, so the stack
// survives its process being killed (SIGKILL, panic, Ctrl-C twice): after a
// restart on the same DataDir every acknowledged workflow, activity result
// and history event is there. It does not fsync on every commit, so on a
// power loss or operating system crash the last transactions before the
// crash may be lost (the database stays consistent, it only goes back in
// time by those transactions). synchronous=FULL would close that gap at the
// cost of an fsync per commit, several per workflow step.
//
// The data dir is locked while a stack runs: a second stack on the same dir
// fails to start instead of fighting over the single history shard.
//
// # Ports
//
// Only the frontend gRPC port and the UI port come from Options (0 picks a
// free one). The frontend HTTP, history, matching and worker services listen
// on free ports on Host picked at every start, and membership is static (no
// ringpop listener), so any number of stacks can run side by side.
//
// # Logs
//
// The server's logs go to Options.Logger through slog, by default at Warn and
// above, so `retrain dev` output stays readable.
package devstack
