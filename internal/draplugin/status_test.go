package draplugin

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const statusDriver = "fpga.dra.dev"

func statusClaim(device string) *resourceapi.ResourceClaim {
	at := metav1.NewTime(time.Unix(1700000000, 0))
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: "uid-1", ResourceVersion: "1", Generation: 3},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{
				AllocationTimestamp: &at,
				Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
					{Request: "fpga", Driver: statusDriver, Pool: "node", Device: device},
					{Request: "nic", Driver: "nic.example.com", Pool: "node", Device: "eth0"},
				}},
			},
			Devices: []resourceapi.AllocatedDeviceStatus{{Driver: "nic.example.com", Pool: "node", Device: "eth0", Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Up"}}}},
		},
	}
}

// updateStatusReactor fails the first n status updates with a Conflict,
// storing mutate's change first as another writer's, and counts them.
func updateStatusReactor(c *fake.Clientset, n int, mutate func(*resourceapi.ResourceClaim)) *int {
	calls := 0
	c.PrependReactor("update", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls > n {
			return false, nil, nil
		}
		stored, err := c.Tracker().Get(claimsGVR, "default", "c")
		if err != nil {
			return true, nil, err
		}
		other := stored.(*resourceapi.ResourceClaim).DeepCopy()
		mutate(other)
		if err := c.Tracker().Update(claimsGVR, other, "default"); err != nil {
			return true, nil, err
		}
		return true, nil, apierrors.NewConflict(claimsGVR.GroupResource(), "c", errors.New("the object has been modified"))
	})
	return &calls
}

var claimsGVR = resourceapi.SchemeGroupVersion.WithResource("resourceclaims")

// TestWriteDeviceStatusMerges: the driver's entry is added beside another
// driver's, a condition replaces only its type (keeping its transition
// time while its status holds), data is set where given; a conflicting
// write by someone else is read again and kept.
func TestWriteDeviceStatusMerges(t *testing.T) {
	claim := statusClaim("port-a")
	client := fake.NewClientset(claim)
	calls := updateStatusReactor(client, 1, func(c *resourceapi.ResourceClaim) {
		c.Labels = map[string]string{"changed": "meanwhile"}
		c.Status.Devices[0].Conditions = append(c.Status.Devices[0].Conditions, metav1.Condition{Type: "Degraded", Status: metav1.ConditionFalse, Reason: "Fine"})
	})
	ctx := context.Background()
	programmed := condition(qualified(statusDriver, ConditionProgrammed), metav1.ConditionTrue, "Programmed", "loaded")
	programmed.LastTransitionTime = metav1.NewTime(time.Unix(1700000100, 0))
	data := &DeviceData{AFUID: "00112233445566778899aabbccddeeff"}
	if _, err := writeDeviceStatus(ctx, client, claim, statusDriver, []deviceStatus{{pool: "node", device: "port-a", conditions: []metav1.Condition{programmed}, data: data}}); err != nil {
		t.Fatal(err)
	}
	if *calls != 2 {
		t.Errorf("status updates: got %d, want 2 (one conflict, one write)", *calls)
	}
	got, err := client.ResourceV1().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Devices) != 2 || len(got.Status.Devices[0].Conditions) != 2 {
		t.Fatalf("the other driver's entry (with the condition written meanwhile) must stay: %+v", got.Status.Devices)
	}
	mine := got.Status.Devices[1]
	if mine.Driver != statusDriver || mine.Device != "port-a" || !apimeta.IsStatusConditionTrue(mine.Conditions, programmed.Type) {
		t.Fatalf("driver entry: %+v", mine)
	}
	if c := apimeta.FindStatusCondition(mine.Conditions, programmed.Type); c.ObservedGeneration != 3 {
		t.Errorf("observedGeneration %d, want the claim's 3", c.ObservedGeneration)
	}
	var gotData DeviceData
	if mine.Data == nil || json.Unmarshal(mine.Data.Raw, &gotData) != nil || gotData.AFUID != data.AFUID {
		t.Fatalf("data: %+v", mine.Data)
	}

	// Ready added later keeps programmed (and its time) and the data.
	ready := condition(ConditionReady, metav1.ConditionTrue, "Prepared", "prepared")
	again := condition(qualified(statusDriver, ConditionProgrammed), metav1.ConditionTrue, "Programmed", "loaded")
	if _, err := writeDeviceStatus(ctx, client, got, statusDriver, []deviceStatus{{pool: "node", device: "port-a", conditions: []metav1.Condition{ready, again}}}); err != nil {
		t.Fatal(err)
	}
	got, err = client.ResourceV1().ResourceClaims("default").Get(ctx, "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mine = got.Status.Devices[1]
	if len(mine.Conditions) != 2 || !apimeta.IsStatusConditionTrue(mine.Conditions, ConditionReady) {
		t.Fatalf("conditions after Ready: %+v", mine.Conditions)
	}
	if c := apimeta.FindStatusCondition(mine.Conditions, programmed.Type); !c.LastTransitionTime.Equal(&programmed.LastTransitionTime) {
		t.Errorf("transition time of an unchanged condition moved: %v, want %v", c.LastTransitionTime, programmed.LastTransitionTime)
	}
	if mine.Data == nil {
		t.Error("data written before was dropped by a write without data")
	}
}

// TestWriteDeviceStatusAllocationChanged: an outcome for an allocation the
// claim no longer has is not written.
func TestWriteDeviceStatusAllocationChanged(t *testing.T) {
	for name, mutate := range map[string]func(*resourceapi.ResourceClaim){
		"deallocated": func(c *resourceapi.ResourceClaim) { c.Status.Allocation = nil; c.Status.Devices = nil },
		"other device in the same second": func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].Device = "port-b"
		},
	} {
		t.Run(name, func(t *testing.T) {
			claim := statusClaim("port-a")
			client := fake.NewClientset(claim)
			calls := updateStatusReactor(client, 1, mutate)
			_, err := writeDeviceStatus(context.Background(), client, claim, statusDriver, []deviceStatus{{pool: "node", device: "port-a",
				conditions: []metav1.Condition{condition(qualified(statusDriver, ConditionProgrammed), metav1.ConditionTrue, "Programmed", "loaded")}}})
			if !errors.Is(err, errAllocationChanged) {
				t.Fatalf("got %v, want errAllocationChanged", err)
			}
			if *calls != 1 {
				t.Errorf("status updates: got %d, want 1", *calls)
			}
			got, _ := client.ResourceV1().ResourceClaims("default").Get(context.Background(), "c", metav1.GetOptions{})
			for _, d := range got.Status.Devices {
				if d.Driver == statusDriver {
					t.Errorf("an outcome was written for a changed allocation: %+v", d)
				}
			}
		})
	}
}
