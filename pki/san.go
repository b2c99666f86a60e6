package pki

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
)

// hardwareModuleName is RFC 4108's HardwareModuleName.
type hardwareModuleName struct {
	HWType      asn1.ObjectIdentifier
	HWSerialNum []byte
}

// otherName is RFC 5280's OtherName with its value explicitly tagged [0].
type otherName struct {
	TypeID asn1.ObjectIdentifier
	Value  asn1.RawValue
}

// hardwareModuleNameSAN builds the non-critical subjectAltName holding one otherName
// hardwareModuleName {hwType 2.23.133.1.2, hwSerialNum}. It is non-critical because the subject
// is never empty (RFC 5280 §4.2.1.6), which is also what SPIRE's tpm_devid needs.
func hardwareModuleNameSAN(hwSerialNum []byte) (pkix.Extension, error) {
	hmn, err := asn1.Marshal(hardwareModuleName{HWType: OIDHWTypeTPM20, HWSerialNum: hwSerialNum})
	if err != nil {
		return pkix.Extension{}, fmt.Errorf("encode hardwareModuleName: %w", err)
	}
	// GeneralName otherName is [0] IMPLICIT OtherName: the SEQUENCE tag becomes [0].
	gn, err := asn1.MarshalWithParams(otherName{
		TypeID: OIDHardwareModuleName,
		Value:  asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: hmn},
	}, "tag:0")
	if err != nil {
		return pkix.Extension{}, fmt.Errorf("encode otherName: %w", err)
	}
	names, err := asn1.Marshal([]asn1.RawValue{{FullBytes: gn}})
	if err != nil {
		return pkix.Extension{}, fmt.Errorf("encode GeneralNames: %w", err)
	}
	return pkix.Extension{Id: OIDSubjectAltName, Critical: false, Value: names}, nil
}

// HardwareModuleName returns the hwType and hwSerialNum of the hardwareModuleName otherName in a
// certificate's subjectAltName, and whether that extension is critical.
func HardwareModuleName(cert *x509.Certificate) (hwType asn1.ObjectIdentifier, hwSerialNum []byte, critical bool, err error) {
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(OIDSubjectAltName) {
			continue
		}
		var names []asn1.RawValue
		if rest, err := asn1.Unmarshal(ext.Value, &names); err != nil || len(rest) != 0 {
			return nil, nil, false, fmt.Errorf("parse subjectAltName: %v", err)
		}
		for _, gn := range names {
			if gn.Class != asn1.ClassContextSpecific || gn.Tag != 0 {
				continue
			}
			var on otherName
			if _, err := asn1.UnmarshalWithParams(gn.FullBytes, &on, "tag:0"); err != nil { // [0] IMPLICIT OtherName
				return nil, nil, false, fmt.Errorf("parse otherName: %w", err)
			}
			if !on.TypeID.Equal(OIDHardwareModuleName) {
				continue
			}
			var hmn hardwareModuleName
			if _, err := asn1.Unmarshal(on.Value.Bytes, &hmn); err != nil {
				return nil, nil, false, fmt.Errorf("parse hardwareModuleName: %w", err)
			}
			return hmn.HWType, hmn.HWSerialNum, ext.Critical, nil
		}
	}
	return nil, nil, false, errors.New("the certificate has no hardwareModuleName subjectAltName")
}
