// The native build: `go generate` in this directory runs cargo, which makes the static
// library ../target/release/libticketing.a that this package links and the server binary
// ../target/release/ticketing that its tests start (docs/go.md).

package ticketing

//go:generate sh -c "cd .. && cargo build --release"
