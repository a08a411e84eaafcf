package luks2

// SetPieceSize sets the read-ahead's piece size for a test and returns
// the function that restores it.
func SetPieceSize(n int) (restore func()) {
	old := pieceSize
	pieceSize = n
	return func() { pieceSize = old }
}
