// SPDX-License-Identifier: Apache-2.0
#include "switchyard/messages/protocol.hpp"

namespace switchyard {

void register_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<Shape>("sy_shape");
  cfg.add_message_type<TensorId>("sy_tensor_id");
  cfg.add_message_type<TensorIr>("sy_tensor_ir");
  cfg.add_message_type<TensorData>("sy_tensor_data");
  cfg.add_message_type<OperationIr>("sy_operation");
  cfg.add_message_type<DeviceStats>("sy_device_stats");
  cfg.add_message_type<DataPart>("sy_data_part");
  cfg.add_message_type<BulkTicket>("sy_bulk_ticket");
  cfg.add_error_category(error_category, [](uint8_t code, caf::atom_value, const caf::message& ctx) {
    std::string out = "switchyard::";
    out += to_string(static_cast<Errc>(code));
    if (ctx.size() == 1 && ctx.match_element<std::string>(0)) {
      out += ": ";
      out += ctx.get_as<std::string>(0);
    }
    return out;
  });
}

}  // namespace switchyard
