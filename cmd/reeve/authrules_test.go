package main

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/reeve-org/reeve/gen/reeve/v1"
	"github.com/reeve-org/reeve/internal/auth"
	"github.com/reeve-org/reeve/internal/etcdtest"
	"github.com/reeve-org/reeve/scheduler"
)

// TestEveryServedMethodHasAnAuthorizationRule walks every method and stream
// the scheduler's gRPC server registers (its services' generated
// descriptors, health and reflection included): each must have a rule in
// internal/auth, or secure mode would refuse it to everyone (as
// RecoverSteps once was, so that no supervisor decision was applied). Every
// reeve.v1 service of the proto files must be served.
func TestEveryServedMethodHasAnAuthorizationRule(t *testing.T) {
	srv := scheduler.New(etcdtest.New(t).Client())
	g, _, err := newGRPCServer(srv, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := g.GetServiceInfo()
	n := 0
	for _, svc := range served {
		n += len(svc.Methods)
	}
	if undecided := auth.Undecided(served); len(undecided) > 0 {
		t.Errorf("methods without an authorization rule: %v", undecided)
	}
	protoregistry.GlobalFiles.RangeFilesByPackage("reeve.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			if name := string(f.Services().Get(i).FullName()); served[name].Methods == nil {
				t.Errorf("service %s of %s is not served", name, f.Path())
			}
		}
		return true
	})
	names := slices.Sorted(maps.Keys(served))
	t.Logf("%d methods of %s", n, strings.Join(names, ", "))
}

// TestUndecidedNamesMethodsWithoutARule: the check above (and newGRPCServer)
// catches a method or stream nobody decided about.
func TestUndecidedNamesMethodsWithoutARule(t *testing.T) {
	g := grpc.NewServer()
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: "reeve.v1.SchedulerService",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Forgotten"}},
		Streams:     []grpc.StreamDesc{{StreamName: "ForgottenStream", ServerStreams: true}},
	}, struct{}{})
	got := auth.Undecided(g.GetServiceInfo())
	want := []string{"/reeve.v1.SchedulerService/Forgotten", "/reeve.v1.SchedulerService/ForgottenStream"}
	if !slices.Equal(got, want) {
		t.Fatalf("Undecided = %v, want %v", got, want)
	}
}
