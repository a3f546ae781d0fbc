package pmiwire

import (
	"encoding/base64"
)

// Values are carried as unpadded URL-safe base64: only A-Z a-z 0-9 - _,
// so no blank, ';' or '=' that either format would split on, 4 characters
// per 3 bytes.
var valueEncoding = base64.RawURLEncoding

// EncodedLen is the length of the encoding of n bytes.
func EncodedLen(n int) int { return valueEncoding.EncodedLen(n) }

// DecodedMax is the largest number of bytes that n encoded characters hold.
func DecodedMax(n int) int { return valueEncoding.DecodedLen(n) }

// AppendValue appends the encoding of v.
func AppendValue(dst, v []byte) []byte { return valueEncoding.AppendEncode(dst, v) }

// DecodeValue decodes an encoded value.
func DecodeValue(s string) ([]byte, error) {
	if len(s) > MaxMessage*64 {
		return nil, malformed("encoded value of %d bytes", len(s))
	}
	b, err := valueEncoding.DecodeString(s)
	if err != nil {
		return nil, malformed("value is not base64url: %v", err)
	}
	return b, nil
}

// LostKey is the PMI key under which amigo's launchers publish the ranks
// they lost while the job goes on: their numbers, comma-separated.
const LostKey = "amigo-lost"
