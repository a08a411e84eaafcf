package bitlk

import "testing"

// FixtureImages unpacks the fixture images for the external benchmark.
func FixtureImages(tb testing.TB) string { return bitlkImages(tb) }
