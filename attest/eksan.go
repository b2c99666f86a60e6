package attest

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"strings"
)

type asn1OID = asn1.ObjectIdentifier

var (
	oidSubjectAltName        = asn1OID{2, 5, 29, 17}
	oidSubjectDirectoryAttrs = asn1OID{2, 5, 29, 9}
	oidTPMManufacturer       = asn1OID{2, 23, 133, 2, 1}  // tcg-at-tpmManufacturer
	oidTPMSpecification      = asn1OID{2, 23, 133, 2, 16} // tcg-at-tpmSpecification
)

// TPMSpec is the TPM specification an EK certificate says the TPM implements: its
// tcg-at-tpmSpecification attribute (TCG EK Credential Profile for TPM Family 2.0, §3.2.9:
// family "2.0", level, revision × 100, e.g. 164 for revision 1.64). Zero when absent.
type TPMSpec struct {
	Family   string
	Level    int
	Revision int
}

// String is the specification as the TCG writes it: "2.0 level 0 revision 1.64".
func (s TPMSpec) String() string {
	return fmt.Sprintf("%s level %d revision %d.%02d", s.Family, s.Level, s.Revision/100, s.Revision%100)
}

// tpmSpec returns the tcg-at-tpmSpecification of an EK certificate, from its
// subjectDirectoryAttributes extension; zero when the certificate carries none or it does not parse.
func tpmSpec(cert *x509.Certificate) TPMSpec {
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectDirectoryAttrs) {
			continue
		}
		var attrs []struct {
			Type   asn1OID
			Values []asn1.RawValue `asn1:"set"`
		}
		if rest, err := asn1.Unmarshal(ext.Value, &attrs); err != nil || len(rest) > 0 {
			return TPMSpec{}
		}
		for _, a := range attrs {
			if !a.Type.Equal(oidTPMSpecification) || len(a.Values) != 1 {
				continue
			}
			var spec struct {
				Family   string `asn1:"utf8"`
				Level    int
				Revision int
			}
			if rest, err := asn1.Unmarshal(a.Values[0].FullBytes, &spec); err != nil || len(rest) > 0 || spec.Family == "" {
				return TPMSpec{}
			}
			return TPMSpec{Family: spec.Family, Level: spec.Level, Revision: spec.Revision}
		}
	}
	return TPMSpec{}
}

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
