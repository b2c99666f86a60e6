package attest

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"strings"
)

type asn1OID = asn1.ObjectIdentifier

var (
	oidSubjectAltName  = asn1OID{2, 5, 29, 17}
	oidTPMManufacturer = asn1OID{2, 23, 133, 2, 1} // tcg-at-tpmManufacturer
)

// tpmManufacturer returns the TPM manufacturer code of an EK certificate: the value of
// tcg-at-tpmManufacturer in the SAN's directoryName ("id:00001014" gives "00001014"), or "" when
// the certificate does not carry one.
func tpmManufacturer(cert *x509.Certificate) string {
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		var names []asn1.RawValue
		if _, err := asn1.Unmarshal(ext.Value, &names); err != nil {
			return ""
		}
		for _, gn := range names {
			// directoryName is [4] EXPLICIT Name.
			if gn.Class != asn1.ClassContextSpecific || gn.Tag != 4 {
				continue
			}
			var rdns pkix.RDNSequence
			if _, err := asn1.Unmarshal(gn.Bytes, &rdns); err != nil {
				continue
			}
			for _, rdn := range rdns {
				for _, atv := range rdn {
					if s, ok := atv.Value.(string); ok && atv.Type.Equal(oidTPMManufacturer) {
						return strings.ToLower(strings.TrimPrefix(s, "id:"))
					}
				}
			}
		}
	}
	return ""
}
