// Package splitmix holds the splitmix64 finalizer, the bit scrambler the
// checksums, column sketches, demo data and hashed embeddings share. Its
// output is persisted (table checksums, model files), so it must never
// change.
package splitmix

// Mix64 is the splitmix64 finalizer: a cheap bijection that spreads every
// input bit over the output.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
