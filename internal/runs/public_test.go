package runs

import (
	"reflect"
	"testing"
	"time"
)

// TestPublicCopiesEveryField fails when leasecrontype.Run gains a field
// that Run.Public does not fill: every field of the public type is set
// from a Run whose every field holds a distinct non-zero value.
func TestPublicCopiesEveryField(t *testing.T) {
	var r Run
	rv := reflect.ValueOf(&r).Elem()
	for i := 0; i < rv.NumField(); i++ {
		f := rv.Field(i)
		if !f.CanSet() {
			continue // the ETag is not public
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(rv.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Struct: // time.Time
			f.Set(reflect.ValueOf(t0.Add(time.Duration(i) * time.Minute)))
		default:
			t.Fatalf("field %s of kind %s: teach this test about it", rv.Type().Field(i).Name, f.Kind())
		}
	}
	p := reflect.ValueOf(r.Public())
	for i := 0; i < p.NumField(); i++ {
		name := p.Type().Field(i).Name
		src := rv.FieldByName(name)
		if !src.IsValid() {
			t.Errorf("leasecrontype.Run.%s has no counterpart in runs.Run", name)
			continue
		}
		if !reflect.DeepEqual(p.Field(i).Interface(), src.Interface()) {
			t.Errorf("Public().%s = %v, want %v", name, p.Field(i).Interface(), src.Interface())
		}
	}
}
