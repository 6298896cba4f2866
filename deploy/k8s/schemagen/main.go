// Command schemagen writes the JSON schemas that kubeconform validates
// berth's Kubernetes manifests against, offline: CI reaches the Go module
// proxy but not the schema repositories kubeconform downloads from by
// default. The schemas are derived by reflection from the Kubernetes API's
// own Go types (k8s.io/api, the version pinned in go.mod), strict: every
// object refuses unknown fields, and fields the API serialises without
// omitempty are required.
//
//	cd deploy/k8s/schemagen && go run . ../schemas
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// kinds are the resources berth's manifests use.
var kinds = []struct {
	apiVersion, kind string
	obj              any
}{
	{"apps/v1", "Deployment", appsv1.Deployment{}},
	{"batch/v1", "Job", batchv1.Job{}},
	{"v1", "Service", corev1.Service{}},
	{"v1", "ConfigMap", corev1.ConfigMap{}},
	{"v1", "Secret", corev1.Secret{}},
	{"v1", "ServiceAccount", corev1.ServiceAccount{}},
	{"policy/v1", "PodDisruptionBudget", policyv1.PodDisruptionBudget{}},
	{"autoscaling/v2", "HorizontalPodAutoscaler", autoscalingv2.HorizontalPodAutoscaler{}},
}

type schema = map[string]any

var (
	quantity    = reflect.TypeFor[resource.Quantity]()
	intOrString = reflect.TypeFor[intstr.IntOrString]()
	timeT       = reflect.TypeFor[metav1.Time]()
	microTime   = reflect.TypeFor[metav1.MicroTime]()
	duration    = reflect.TypeFor[metav1.Duration]()
	rawExt      = reflect.TypeFor[runtime.RawExtension]()
	marshaler   = reflect.TypeFor[json.Marshaler]()
)

type gen struct{ defs map[string]schema }

func nullable(typ string) schema { return schema{"type": []string{typ, "null"}} }

func (g *gen) of(t reflect.Type) schema {
	switch t {
	case quantity:
		return schema{"oneOf": []schema{{"type": "string"}, {"type": "number"}}}
	case intOrString:
		return schema{"oneOf": []schema{{"type": "string"}, {"type": "integer"}}}
	case timeT, microTime, duration:
		return nullable("string")
	case rawExt:
		return schema{}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.of(t.Elem())
	case reflect.Bool:
		return schema{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return schema{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return schema{"type": "number"}
	case reflect.String:
		return schema{"type": "string"}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return nullable("string") // []byte is base64
		}
		return schema{"type": []string{"array", "null"}, "items": g.of(t.Elem())}
	case reflect.Map:
		return schema{"type": []string{"object", "null"}, "additionalProperties": g.of(t.Elem())}
	case reflect.Struct:
		if reflect.PointerTo(t).Implements(marshaler) || t.Implements(marshaler) {
			return schema{} // a custom encoding this generator does not know: accept anything
		}
		name := strings.ReplaceAll(t.PkgPath(), "/", ".") + "." + t.Name()
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = nil // breaks recursion
			g.defs[name] = g.object(t)
		}
		return schema{"$ref": "#/definitions/" + name}
	}
	return schema{}
}

func (g *gen) object(t reflect.Type) schema {
	props := schema{}
	var required []string
	g.fields(t, props, &required)
	s := schema{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		sort.Strings(required)
		s["required"] = required
	}
	return s
}

func (g *gen) fields(t reflect.Type, props schema, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			g.fields(ft, props, required)
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.of(f.Type)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") &&
			f.Type.Kind() != reflect.Pointer && name != "status" {
			*required = append(*required, name)
		}
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: schemagen <output dir>")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, k := range kinds {
		g := &gen{defs: map[string]schema{}}
		top := g.object(reflect.TypeOf(k.obj))
		props := top["properties"].(schema)
		props["apiVersion"] = schema{"type": "string", "enum": []string{k.apiVersion}}
		props["kind"] = schema{"type": "string", "enum": []string{k.kind}}
		top["required"] = []string{"apiVersion", "kind", "metadata"}
		top["$schema"] = "http://json-schema.org/draft-07/schema#"
		top["description"] = fmt.Sprintf("%s %s, generated from k8s.io/api by deploy/k8s/schemagen", k.apiVersion, k.kind)
		top["definitions"] = g.defs
		b, err := json.MarshalIndent(top, "", " ")
		if err != nil {
			return err
		}
		// kubeconform's {{ .ResourceKind }}{{ .KindSuffix }}: kind, then the
		// group's first label, then the version, lower-case.
		suffix := "-" + k.apiVersion
		if grp, ver, ok := strings.Cut(k.apiVersion, "/"); ok {
			grp, _, _ = strings.Cut(grp, ".")
			suffix = "-" + grp + "-" + ver
		}
		file := filepath.Join(dir, strings.ToLower(k.kind+suffix)+".json")
		if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}
