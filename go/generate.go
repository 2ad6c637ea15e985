// The native build: `go generate` in this directory runs cargo, which makes the static
// library ../target/release/libticketing.a that this package links (docs/go.md).

package ticketing

//go:generate sh -c "cd .. && cargo build --release --lib"
