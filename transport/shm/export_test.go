package shm

// ForgetHuge empties the table of blocks this process asked to collapse, so
// that a test sees its buffers asked for whatever earlier tests did.
func ForgetHuge() {
	for i := range hugeBlocks {
		hugeBlocks[i].Store(0)
	}
}
