//go:build race

package sector

// The race detector makes sync.Pool drop items at random, so allocation
// counts mean nothing under -race.
const raceEnabled = true
