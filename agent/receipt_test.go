package agent_test

import (
	"strings"
	"testing"

	"github.com/folly-infra/fleetd/agent"
	"github.com/folly-infra/fleetd/attest"
)

// TestParseWipeResult: the wipe program's report is read strictly (docs/http.md, "Wipe
// receipts"): every key once, no other key, bytes a decimal count.
func TestParseWipeResult(t *testing.T) {
	full := "serial=S3Z9NB0K123456\nmethod=blkdiscard\nresult=erased\nbytes=1000204886016\n"
	for _, tc := range []struct {
		name, in string
		want     attest.WipeReport
		err      string
	}{
		{name: "ok/four keys", in: full, want: attest.WipeReport{DiskSerial: "S3Z9NB0K123456", Method: "blkdiscard", Result: "erased", Bytes: 1000204886016}},
		{name: "ok/comments, blank lines, any order, a failure", in: "# wipe-disk\n\nresult=failed\nbytes=0\nmethod=wipefs\nserial=S1\n",
			want: attest.WipeReport{DiskSerial: "S1", Method: "wipefs", Result: "failed"}},
		{name: "refuse/a key missing", in: "serial=S1\nmethod=wipefs\nresult=erased\n", err: "no bytes= line"},
		{name: "refuse/a key twice", in: full + "result=erased\n", err: "result is given twice"},
		{name: "refuse/a misspelt key", in: strings.Replace(full, "method", "methd", 1), err: `unknown key "methd"`},
		{name: "refuse/not key=value", in: full + "erased\n", err: "line 5 is not key=value"},
		{name: "refuse/bytes not a count", in: strings.Replace(full, "1000204886016", "1 TB", 1), err: `bytes "1 TB" is not a decimal count`},
		{name: "refuse/negative bytes", in: strings.Replace(full, "1000204886016", "-1", 1), err: "is not a decimal count"},
		{name: "refuse/empty", in: "", err: "no serial= line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := agent.ParseWipeResult([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("got %+v, %v; want an error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
