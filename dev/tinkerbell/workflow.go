package tinkerbell

import (
	"encoding/json"
	"fmt"
	"strings"

	tinkv1 "github.com/tinkerbell/tink/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Workflow is a Tinkerbell Workflow as the development stack reads it, whichever Tinkerbell
// wrote its status: tink v0.12.2 (STATE_ states, actions[].status, status.currentAction,
// status.templateRending) or v0.25 (bare states, actions[].state and id, status.currentState,
// status.templateRendering); see tink v0.12.2's api/v1alpha1/workflow_types.go and
// tinkerbell/tinkerbell's api/v1alpha1/tinkerbell/workflow.go. Its spec is v0.12.2's, which v0.25
// reads unchanged. The stack creates Workflows with it and never writes their status.
//
// It replaces tink v0.12.2's Go type of the same kind in the stack's scheme (Scheme): decoded into
// that type, a v0.25 Workflow would lose its action states.
type Workflow struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   tinkv1.WorkflowSpec `json:"spec,omitempty"`
	Status WorkflowStatus      `json:"status,omitempty"`
}

// WorkflowList is a list of Workflows.
type WorkflowList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Workflow `json:"items"`
}

// WorkflowStatus is the union of both versions' status fields the stack reads.
type WorkflowStatus struct {
	State tinkv1.WorkflowState `json:"state,omitempty"`
	// CurrentAction is v0.12.2's; v0.25 has CurrentState.ActionName (see CurrentAction).
	CurrentAction string        `json:"currentAction,omitempty"`
	CurrentState  *CurrentState `json:"currentState,omitempty"`
	// TemplateRending is v0.12.2's (sic), TemplateRendering v0.25's (see Rendering).
	TemplateRending   tinkv1.TemplateRendering   `json:"templateRending,omitempty"`
	TemplateRendering tinkv1.TemplateRendering   `json:"templateRendering,omitempty"`
	GlobalTimeout     int64                      `json:"globalTimeout,omitempty"`
	AgentID           string                     `json:"agentID,omitempty"`
	Tasks             []Task                     `json:"tasks,omitempty"`
	Conditions        []tinkv1.WorkflowCondition `json:"conditions,omitempty"`
}

// CurrentState is v0.25's record of the action an agent was served last.
type CurrentState struct {
	AgentID    string               `json:"agentID,omitempty"`
	TaskID     string               `json:"taskID,omitempty"`
	ActionID   string               `json:"actionID,omitempty"`
	State      tinkv1.WorkflowState `json:"state,omitempty"`
	ActionName string               `json:"actionName,omitempty"`
	TaskName   string               `json:"taskName,omitempty"`
}

// Task is one rendered task: WorkerAddr is v0.12.2's worker, AgentID v0.25's.
type Task struct {
	ID          string            `json:"id,omitempty"`
	Name        string            `json:"name"`
	WorkerAddr  string            `json:"worker,omitempty"`
	AgentID     string            `json:"agentID,omitempty"`
	Actions     []TaskAction      `json:"actions"`
	Volumes     []string          `json:"volumes,omitempty"`
	Environment map[string]string `json:"environment,omitempty"`
}

// TaskAction is one rendered action: Status is v0.12.2's state, State v0.25's; ID is v0.25's
// (a ULID the controller gives it, which the agent's container is named after); StartedAt and
// Seconds are v0.12.2's, ExecutionStart and ExecutionStop v0.25's.
type TaskAction struct {
	ID          string               `json:"id,omitempty"`
	Name        string               `json:"name,omitempty"`
	Image       string               `json:"image,omitempty"`
	Timeout     int64                `json:"timeout,omitempty"`
	Command     []string             `json:"command,omitempty"`
	Volumes     []string             `json:"volumes,omitempty"`
	Pid         string               `json:"pid,omitempty"`
	Environment map[string]string    `json:"environment,omitempty"`
	Status      tinkv1.WorkflowState `json:"status,omitempty"`
	State       tinkv1.WorkflowState `json:"state,omitempty"`
	Message     string               `json:"message,omitempty"`

	StartedAt      *metav1.Time `json:"startedAt,omitempty"`
	Seconds        int64        `json:"seconds,omitempty"`
	ExecutionStart *metav1.Time `json:"executionStart,omitempty"`
	ExecutionStop  *metav1.Time `json:"executionStop,omitempty"`
}

// ActionState is the action's state as either version wrote it.
func (a TaskAction) ActionState() tinkv1.WorkflowState {
	if a.State != "" {
		return a.State
	}
	return a.Status
}

// CurrentAction is the action the Workflow is at, as either version wrote it.
func (wf *Workflow) CurrentAction() string {
	if wf.Status.CurrentAction != "" || wf.Status.CurrentState == nil {
		return wf.Status.CurrentAction
	}
	return wf.Status.CurrentState.ActionName
}

// Rendering is whether the controller rendered the Template ("successful" or "failed"), as
// either version wrote it.
func (wf *Workflow) Rendering() tinkv1.TemplateRendering {
	if wf.Status.TemplateRendering != "" {
		return wf.Status.TemplateRendering
	}
	return wf.Status.TemplateRending
}

// DeepCopy copies the Workflow through its JSON, which holds all of it.
func (wf *Workflow) DeepCopy() *Workflow {
	out := &Workflow{}
	jsonCopy(wf, out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (wf *Workflow) DeepCopyObject() runtime.Object { return wf.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *WorkflowList) DeepCopyObject() runtime.Object {
	out := &WorkflowList{}
	jsonCopy(l, out)
	return out
}

func jsonCopy(in, out any) {
	b, err := json.Marshal(in)
	if err == nil {
		err = json.Unmarshal(b, out)
	}
	if err != nil { // every field is plain JSON: this cannot happen
		panic(fmt.Sprintf("copy %T: %v", in, err))
	}
}

// Scheme is the development stack's scheme of Tinkerbell's group: tink v0.12.2's Hardware and
// Template (which it reads and writes only in fields both versions share) and Workflow, the
// union of both versions' Workflows.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	gv := tinkv1.GroupVersion
	s.AddKnownTypes(gv, &tinkv1.Hardware{}, &tinkv1.HardwareList{}, &tinkv1.Template{}, &tinkv1.TemplateList{},
		&Workflow{}, &WorkflowList{})
	metav1.AddToGroupVersion(s, gv)
	return s, nil
}

// BareState is a state without tink v0.12's STATE_ prefix, for comparisons ("SUCCESS" for
// STATE_SUCCESS and for v0.25's SUCCESS alike).
func BareState(s tinkv1.WorkflowState) string { return strings.TrimPrefix(string(s), "STATE_") }
