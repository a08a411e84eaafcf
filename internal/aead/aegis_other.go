//go:build !amd64 || purego

package aead

const (
	useAESNI = false
	useVAES  = false
)

func sealAESNI(j *job) { panic("aead: no AES-NI kernel in this build") }
func openAESNI(j *job) { panic("aead: no AES-NI kernel in this build") }
func sealVAES4(j *job) { panic("aead: no VAES kernel in this build") }
func openVAES4(j *job) { panic("aead: no VAES kernel in this build") }
func sealVAES8(j *job) { panic("aead: no VAES kernel in this build") }
func openVAES8(j *job) { panic("aead: no VAES kernel in this build") }
